"""The load generators: appends at a fixed rate or at saturation, timed to their commit.

- ``embedded_load(server, ...)``: inside the process of a node that leads, on its
  ``DLedgerServer`` from a host thread, as an embedding broker does (``append`` for the fixed
  rate, ``batch_append`` with a window of batches in flight for saturation). Completions are
  recorded by done-callbacks, on the node's loop thread, at the moment the answer is known.
- ``client_load(peers, group, ...)``: the same two loads through ``AsyncDLedgerClient`` from
  another process (one connection to the leader; ``window`` calls in flight).

The latency of a call is from the call to its SUCCESS answer (commit on a quorum); a batch
counts once. The first ``warmup_s`` seconds are run but not counted. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

from dledger.bench.stats import LoadResult
from dledger.errors import DLedgerResponseCode

SUCCESS = int(DLedgerResponseCode.SUCCESS)


def _bodies(payload: int, batch: int) -> list[bytes]:
    return [bytes([k % 251]) * payload for k in range(batch)]


class _Tally:
    """Completions as they come: ``(done_at, entries, latency_s, ok)``; thread-safe enough for
    appends from one callback thread and reads after the run."""

    def __init__(self) -> None:
        self.done: list[tuple[float, int, float, bool]] = []
        #: failed calls by answer code (or exception name)
        self.codes: dict = {}

    def result(self, t0: float, warmup_s: float, calls: int) -> LoadResult:
        start = t0 + warmup_s
        counted = [d for d in self.done if d[0] >= start]
        ok = [d for d in counted if d[3]]
        res = LoadResult(calls=calls, failures=sum(1 for d in counted if not d[3]),
                         failure_codes={str(k): v for k, v in self.codes.items()})
        if ok:
            res.committed = sum(d[1] for d in ok)
            res.seconds = max(d[0] for d in ok) - start
            res.latencies_ms = [d[2] * 1000 for d in ok]
        return res


def callback_load(submit: Callable, payload: int, seconds: float, *, rate: float | None = None, batch: int | None = None,
                  window: int = 16, warmup_s: float = 0.5, on_progress: Callable[[int], None] | None = None
                  ) -> LoadResult:
    """Run appends from this (host) thread for ``warmup_s + seconds`` through ``submit(bodies,
    done)``, which starts appending ``bodies`` (a list) and arranges for ``done(code)`` to be
    called, from any thread, with the answer's code once they commit: ``rate`` appends per
    second in calls of ``batch`` bodies (``rate / batch`` calls a second), or (``rate`` None)
    calls of ``batch`` bodies with ``window`` calls in flight. ``batch`` defaults to 1 with a
    ``rate`` (one append at a time), else 64."""
    if batch is None:
        batch = 64 if rate is None else 1
    tally = _Tally()
    slots = threading.Semaphore(window if rate is None else 1 << 30)
    bodies = _bodies(payload, batch)
    n = len(bodies)
    perf = time.perf_counter
    record = tally.done.append
    codes = tally.codes

    def done_cb(t_call: float, entries: int):
        def done(code) -> None:
            now = perf()
            record((now, entries, now - t_call, code == SUCCESS))
            if code != SUCCESS:
                codes[code] = codes.get(code, 0) + 1
            slots.release()
        return done

    t0 = perf()
    end = t0 + warmup_s + seconds
    calls = 0
    next_report = t0 + 1.0
    interval = batch / rate if rate else 0.0
    tick = t0
    while True:
        if rate is None:
            if not slots.acquire(timeout=max(0.0, end - perf())):
                break
        else:
            delay = tick - perf()
            if delay > 0:
                time.sleep(delay)
            tick += interval
        now = perf()
        if now >= end:
            break
        submit(bodies, done_cb(now, n))
        calls += 1
        if on_progress is not None and now >= next_report:
            on_progress(len(tally.done) * n)
            next_report = now + 1.0
    # wait (bounded) for what is still in flight
    deadline = perf() + 15.0
    while len(tally.done) < calls and perf() < deadline:
        time.sleep(0.005)
    return tally.result(t0, warmup_s, calls)


def server_submit(server) -> Callable:
    """``submit`` for ``callback_load`` on a ``DLedgerServer``: ``append`` for one body,
    ``batch_append`` for more, the future's code (or the exception's name) to ``done``."""
    def submit(bodies: list[bytes], done: Callable) -> None:
        fut = server.append(bodies[0]) if len(bodies) == 1 else server.batch_append(bodies)

        def on_done(f) -> None:
            try:
                code = f.result().code
            except Exception as exc:
                code = type(exc).__name__
            done(code)

        fut.add_done_callback(on_done)
    return submit


def embedded_load(server, payload: int, seconds: float, **kwargs) -> LoadResult:
    """``callback_load`` on ``server`` (which should lead), as an embedding broker appends."""
    return callback_load(server_submit(server), payload, seconds, **kwargs)


async def client_load(client, payload: int, seconds: float, *, rate: float | None = None, batch: int = 64,
                      window: int = 16, warmup_s: float = 0.5,
                      on_progress: Callable[[int], None] | None = None) -> LoadResult:
    """The same loads through an ``AsyncDLedgerClient`` (already created, on this loop)."""
    loop = asyncio.get_running_loop()
    tally = _Tally()
    perf = time.perf_counter
    record = tally.done.append
    bodies = _bodies(payload, batch)
    calls = 0

    async def one(call, arg, entries: int) -> None:
        t = perf()
        try:
            code = (await call(arg)).code
        except Exception as exc:
            code = type(exc).__name__
        now = perf()
        record((now, entries, now - t, code == SUCCESS))
        if code != SUCCESS:
            tally.codes[code] = tally.codes.get(code, 0) + 1

    t0 = perf()
    end = t0 + warmup_s + seconds
    if rate is None:
        async def worker() -> None:
            nonlocal calls
            while perf() < end:
                calls += 1
                await one(client.batch_append, bodies, len(bodies))

        async def progress() -> None:
            while perf() < end:
                await asyncio.sleep(1.0)
                if on_progress is not None:
                    on_progress(len(tally.done) * len(bodies))

        prog = loop.create_task(progress())
        async with asyncio.timeout(warmup_s + seconds + 30):
            await asyncio.gather(*(worker() for _ in range(window)))
        prog.cancel()
    else:
        interval = 1.0 / rate
        tasks = set()
        tick = t0
        next_report = t0 + 1.0
        while tick < end:
            delay = tick - perf()
            if delay > 0:
                await asyncio.sleep(delay)
            task = loop.create_task(one(client.append, bodies[0], 1))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            calls += 1
            tick += interval
            if on_progress is not None and perf() >= next_report:
                on_progress(len(tally.done))
                next_report = perf() + 1.0
        if tasks:
            await asyncio.wait(tasks, timeout=30)
    return tally.result(t0, warmup_s, calls)


__all__ = ["callback_load", "client_load", "embedded_load", "server_submit"]
