"""SimScheduler: virtual time for the simulator; implements the ``runtime.Runtime`` protocol.

Events sit in a heap ordered by (time, sequence number), so two runs that schedule the same
events run them in the same order: same seed, same run. Time only moves when the heap's next
event is later than now; nothing here reads the wall clock. ``run_sync`` and
``call_soon_threadsafe`` exist for the protocol: the simulator has one thread.

The rest of the environment a server takes from its runtime is virtual too: ``wall_time()`` is
``SIM_EPOCH`` plus virtual time, and ``background_flush`` is False (the periodic msync runs on
the simulator's one thread).

``process(name)`` gives one simulated process its own view of the scheduler (a ``SimProcess``,
also a ``Runtime``): the same clock and heap, but ``kill()`` cancels every timer the process
armed at once and ignores whatever it arms later, as the operating system does when it kills a
process. Host calls into a dead process (``call_soon_threadsafe``, ``run_sync``) raise
``ProcessKilled``.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable


#: the virtual wall clock at virtual time 0 (2023-11-14): earlier than any real file time, so
#: segment files never look old enough for age-based cleaning in a simulation
SIM_EPOCH = 1_700_000_000.0


class ProcessKilled(RuntimeError):
    """A host called into a simulated process that has been killed."""


class _Timer:
    __slots__ = ("cancelled", "owner")

    def __init__(self, owner: "SimProcess | None" = None) -> None:
        self.cancelled = False
        self.owner = owner

    def cancel(self) -> None:
        self.cancelled = True


class SimScheduler:
    background_flush = False

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

    def wall_time(self) -> float:
        return SIM_EPOCH + self.now / 1000

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> _Timer:
        timer = _Timer()
        self._seq += 1
        heapq.heappush(self._heap, (max(int(when_ms), self.now), self._seq, timer, fn, args))
        return timer

    def _push(self, when_ms: int, timer: _Timer, fn: Callable[..., Any], args: tuple) -> _Timer:
        self._seq += 1
        heapq.heappush(self._heap, (max(int(when_ms), self.now), self._seq, timer, fn, args))
        return timer

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        return self.call_at(self.now, fn, *args)

    call_soon_threadsafe = call_soon

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def process(self, name: str) -> "SimProcess":
        """A new simulated process on this scheduler (see ``SimProcess``)."""
        return SimProcess(self, name)

    def _cancel_owned_by(self, owner: "SimProcess") -> None:
        for entry in self._heap:
            if entry[2].owner is owner:
                entry[2].cancelled = True

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


class SimProcess:
    """One simulated process's view of a ``SimScheduler``: a ``Runtime`` whose timers die with it.

    Every timer armed through the view belongs to it; ``kill()`` cancels them all, and from
    then on ``call_at``/``call_soon`` arm nothing (they hand back a cancelled timer) while
    ``call_soon_threadsafe``/``run_sync`` (calls coming from a host) raise ``ProcessKilled``.
    """

    background_flush = False

    def __init__(self, scheduler: SimScheduler, name: str) -> None:
        self.scheduler = scheduler
        self.name = name
        self.alive = True

    def now_ms(self) -> int:
        return self.scheduler.now

    def wall_time(self) -> float:
        return self.scheduler.wall_time()

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> _Timer:
        if not self.alive:
            timer = _Timer(self)
            timer.cancelled = True
            return timer
        return self.scheduler._push(when_ms, _Timer(self), fn, args)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        return self.call_at(self.scheduler.now, fn, *args)

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        self._check_alive()
        return self.call_at(self.scheduler.now, fn, *args)

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        self._check_alive()
        return fn()

    def _check_alive(self) -> None:
        if not self.alive:
            raise ProcessKilled(f"process {self.name} has been killed")

    def kill(self) -> None:
        """The process dies: every timer it armed is cancelled, nothing it arms later runs."""
        if self.alive:
            self.alive = False
            self.scheduler._cancel_owned_by(self)

    def __repr__(self) -> str:
        return f"SimProcess({self.name}, {'alive' if self.alive else 'killed'})"
