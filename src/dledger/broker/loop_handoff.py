"""Put answers handed to an asyncio server's loop in runs, one wake-up per run.

The commit log answers a put on the node's runtime thread; the remoting and gRPC servers await
it on loops of their own. ``asyncio.wrap_future`` makes that one ``call_soon_threadsafe`` per
answer: a write to the loop's self-pipe and a wake-up of its thread each time, though one batch
append answers every put of the batch in the same runtime turn. A ``Handoff`` queues each
answer and wakes the loop once for everything queued since its last turn; the answers are then handed on in the order they came: ``when_done(future, timeout, fn)``
calls ``fn`` on the loop (no task needed), ``await result(future, timeout)`` returns the value.

``result`` raises ``TimeoutError`` when no answer came within ``timeout`` seconds (the put may
still be answered later: nobody waits for it then), and whatever the future raised. A waiter
cancelled meanwhile (its connection closed) is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import Future

log = logging.getLogger(__name__)


class Handoff:
    """Hands ``concurrent.futures.Future`` answers to the running loop (one ``Handoff`` per loop)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queued: deque = deque()
        self._scheduled = False

    def when_done(self, future: Future, timeout: float, fn) -> None:
        """``fn(future)`` on the running loop once ``future`` is done, or ``fn(None)`` if it is
        not done within ``timeout`` seconds (whichever comes first; ``fn`` runs once)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if future.done():
            fn(future)
            return
        waiting = [fn, None]                        # [fn, timer]; fn None once it ran
        waiting[1] = loop.call_later(timeout, self._expire, waiting)
        future.add_done_callback(lambda f: self._push(waiting, f))

    async def result(self, future: Future, timeout: float):
        """``future``'s result, awaited on the running loop; ``TimeoutError`` after ``timeout`` s."""
        if future.done():
            return future.result()
        waiter = asyncio.get_running_loop().create_future()

        def settle(done: Future | None) -> None:
            if waiter.done():                       # the awaiting task was cancelled
                return
            if done is None:
                waiter.set_exception(TimeoutError(f"no answer within {timeout} s"))
            elif done.cancelled():
                waiter.cancel()
            elif done.exception() is not None:
                waiter.set_exception(done.exception())
            else:
                waiter.set_result(done.result())

        self.when_done(future, timeout, settle)
        return await waiter

    @staticmethod
    def _expire(waiting: list) -> None:
        fn, waiting[0] = waiting[0], None
        if fn is not None:
            fn(None)

    def _push(self, waiting: list, future: Future) -> None:
        """An answer came (any thread): queued, and the loop woken unless a turn is pending."""
        self._queued.append((waiting, future))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:                 # the loop is closed: nobody waits any more
                pass

    def _deliver(self) -> None:
        # the flag is lowered before the queue is read: an answer queued after the last read
        # sees it lowered and schedules the next turn
        self._scheduled = False
        queued = self._queued
        while queued:
            waiting, future = queued.popleft()
            fn, waiting[0] = waiting[0], None
            if fn is None:                          # timed out earlier
                continue
            waiting[1].cancel()
            try:
                fn(future)
            except Exception:  # noqa: BLE001 - one answer's failure must not stop the others
                log.exception("handing an answer to the loop")


__all__ = ["Handoff"]
