"""loop_handoff.Handoff: answers set on another thread reach the loop in runs, once each."""

import asyncio
import threading
from concurrent.futures import Future

import pytest

from dledger.broker.loop_handoff import Handoff


def run(coro):
    return asyncio.run(coro)


def on_thread(fn) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_a_run_of_answers_wakes_the_loop_once_and_keeps_their_order():
    async def main():
        handoff, futures = Handoff(), [Future() for _ in range(50)]
        got: list[int] = []
        for f in futures:
            handoff.when_done(f, 30.0, lambda done: got.append(done.result()))
        loop = asyncio.get_running_loop()
        wakeups = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda fn, *a: (wakeups.append(fn), real(fn, *a))[1]
        try:
            on_thread(lambda: [f.set_result(i) for i, f in enumerate(futures)])   # one runtime turn
            while len(got) < 50:
                await asyncio.sleep(0)
        finally:
            del loop.call_soon_threadsafe
        assert got == list(range(50))
        assert len(wakeups) == 1
        # the next answer wakes the loop again: the flag was lowered
        f = Future()
        waiter = asyncio.ensure_future(handoff.result(f, 30.0))
        await asyncio.sleep(0)
        on_thread(lambda: f.set_result("later"))
        assert await waiter == "later"
    run(main())


def test_result_returns_raises_and_times_out():
    async def main():
        handoff = Handoff()
        done = Future()
        done.set_result(7)
        assert await handoff.result(done, 1.0) == 7                 # already answered: no hop
        failing = Future()
        waiter = asyncio.ensure_future(handoff.result(failing, 30.0))
        await asyncio.sleep(0)
        on_thread(lambda: failing.set_exception(ValueError("append failed")))
        with pytest.raises(ValueError, match="append failed"):
            await waiter
        silent = Future()
        with pytest.raises(TimeoutError, match="no answer within 0.01 s"):
            await handoff.result(silent, 0.01)
        calls = []
        late = Future()
        handoff.when_done(late, 0.01, calls.append)
        while not calls:                                            # until its timeout ran
            await asyncio.sleep(0.005)
        on_thread(lambda: late.set_result(1))                       # after its timeout: not handed on
        on_thread(lambda: silent.set_result(2))
        sentinel = Future()                                         # answers come in order: once this
        waiter = asyncio.ensure_future(handoff.result(sentinel, 30.0))  # one is in, so are the two above
        await asyncio.sleep(0)
        on_thread(lambda: sentinel.set_result(0))
        assert await waiter == 0
        assert calls == [None]
    run(main())


def test_a_cancelled_waiter_is_skipped_and_others_still_get_their_answers():
    async def main():
        handoff = Handoff()
        first, second = Future(), Future()
        gone = asyncio.ensure_future(handoff.result(first, 30.0))
        kept = asyncio.ensure_future(handoff.result(second, 30.0))
        await asyncio.sleep(0)
        gone.cancel()                                               # its connection closed
        on_thread(lambda: (first.set_result(1), second.set_result(2)))
        assert await kept == 2
        assert gone.cancelled()
    run(main())


def test_one_failing_callback_does_not_stop_the_run():
    async def main():
        handoff = Handoff()
        futures = [Future(), Future()]
        got = []
        handoff.when_done(futures[0], 30.0, lambda done: 1 / 0)
        handoff.when_done(futures[1], 30.0, lambda done: got.append(done.result()))
        on_thread(lambda: [f.set_result(i) for i, f in enumerate(futures)])
        while not got:
            await asyncio.sleep(0)
        assert got == [1]
    run(main())
