"""SimScheduler: virtual time for the simulator; implements the ``runtime.Runtime`` protocol.

Events sit in a heap ordered by (time, sequence number), so two runs that schedule the same
events run them in the same order: same seed, same run. Time only moves when the heap's next
event is later than now; nothing here reads the wall clock. ``run_sync`` and
``call_soon_threadsafe`` exist for the protocol: the simulator has one thread.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimScheduler:
    def __init__(self) -> None:
        self.now = 0
        self._heap: list = []
        self._seq = 0
        self.events_run = 0
        self.max_events_per_ms = 200_000
        self._same_time = 0

    # -- Runtime protocol -----------------------------------------------------------------
    def now_ms(self) -> int:
        return self.now

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> _Timer:
        timer = _Timer()
        self._seq += 1
        heapq.heappush(self._heap, (max(int(when_ms), self.now), self._seq, timer, fn, args))
        return timer

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        return self.call_at(self.now, fn, *args)

    call_soon_threadsafe = call_soon

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        return fn()

    # -- running --------------------------------------------------------------------------
    def next_time(self) -> int | None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def step(self) -> bool:
        """Run the next event (moving time to it); False when nothing is scheduled.

        Raises ``RuntimeError`` when more than ``max_events_per_ms`` events run without time
        moving: a livelock in the code under test (something re-arming itself at "now").
        """
        heap = self._heap
        while heap:
            when, _seq, timer, fn, args = heapq.heappop(heap)
            if timer.cancelled:
                continue
            if when == self.now:
                self._same_time += 1
                if self._same_time > self.max_events_per_ms:
                    raise RuntimeError(f"livelock: more than {self.max_events_per_ms} events at {when} ms "
                                       f"without time moving (last: {getattr(fn, '__qualname__', fn)})")
            else:
                self._same_time = 0
            self.now = when
            self.events_run += 1
            fn(*args)
            return True
        return False

    def run_until(self, t_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Run events up to virtual time ``t_ms`` (then set now to it). With ``stop``, return
        True as soon as it holds (checked after every event)."""
        while True:
            nxt = self.next_time()
            if nxt is None or nxt > t_ms:
                break
            self.step()
            if stop is not None and stop():
                return True
        self.now = max(self.now, t_ms)
        return stop() if stop is not None else False
