"""SimScheduler: virtual time for the simulator; implements the ``runtime.Runtime`` protocol.

Events sit in a heap ordered by (time, sequence number), so two runs that schedule the same
events run them in the same order: same seed, same run. Time only moves when the heap's next
event is later than now; nothing here reads the wall clock. ``run_sync`` and
``call_soon_threadsafe`` exist for the protocol: the simulator has one thread.

The rest of the environment a server takes from its runtime is virtual too: ``wall_time()`` is
``SIM_EPOCH`` plus virtual time, and ``background_flush`` is False (the periodic msync runs on
the simulator's one thread).

``process(name, clock=None)`` gives one simulated process its own view of the scheduler (a
``SimProcess``, also a ``Runtime``): the same heap, but
- its time is its machine's ``SimClock`` (``dledger.sim.clocks``: drift, jumps), ideal by
  default; the timers it arms are in that local time;
- ``kill()`` cancels every timer the process armed at once and ignores whatever it arms later,
  as the operating system does when it kills a process. Host calls into a dead process
  (``call_soon_threadsafe``, ``run_sync``) raise ``ProcessKilled``;
- ``pause(ms)`` freezes it (a stop-the-world pause, a descheduled VM, slow I/O): its timers
  that come due and the messages that arrive for it (``hold``) wait, and ``resume()`` runs
  them in the order they came due; time moves on for everyone else.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

from dledger.sim.clocks import SIM_EPOCH, SimClock

__all__ = ["SIM_EPOCH", "ProcessKilled", "SimProcess", "SimScheduler"]


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
        #: sequence numbers below every other, for what a resumed process runs first
        self._first = 0
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

    def _push_first(self, entries: list) -> None:
        """Run ``entries`` (timer, fn, args) now, in order, before anything else due now."""
        self._first -= len(entries)
        for k, (timer, fn, args) in enumerate(entries):
            heapq.heappush(self._heap, (self.now, self._first + k, timer, fn, args))

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        return self.call_at(self.now, fn, *args)

    call_soon_threadsafe = call_soon

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def process(self, name: str, clock: SimClock | None = None) -> "SimProcess":
        """A new simulated process on this scheduler (see ``SimProcess``), reading ``clock``
        (its machine's; default: an ideal clock)."""
        return SimProcess(self, name, clock)

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
        """Run the next event (moving time to it); False when nothing is scheduled. An event
        of a paused process is put aside for it instead of run.

        Raises ``RuntimeError`` when more than ``max_events_per_ms`` events run without time
        moving: a livelock in the code under test (something re-arming itself at "now").
        """
        heap = self._heap
        while heap:
            when, _seq, timer, fn, args = heapq.heappop(heap)
            if timer.cancelled:
                continue
            owner = timer.owner
            if owner is not None and owner.paused:
                # due now, but its process is frozen: it waits for ``resume`` (time still moves
                # to it, so ``run_until`` never runs past its bound)
                owner._held.append((timer, fn, args))
                self.now = when
                return True
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

    def __init__(self, scheduler: SimScheduler, name: str, clock: SimClock | None = None) -> None:
        self.scheduler = scheduler
        self.name = name
        self.alive = True
        self.clock = clock if clock is not None else SimClock(scheduler)
        #: frozen by ``pause``: what comes due meanwhile waits in ``_held`` (timer, fn, args)
        self.paused = False
        self._held: list = []
        self._resume_timer: _Timer | None = None
        self._resume_at = -1

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def wall_time(self) -> float:
        return self.clock.wall_time()

    def call_at(self, when_ms: int, fn: Callable[..., Any], *args: Any) -> _Timer:
        """Arm a timer for ``when_ms`` of this process's clock."""
        if not self.alive:
            timer = _Timer(self)
            timer.cancelled = True
            return timer
        return self.scheduler._push(self.clock.to_virtual(when_ms), _Timer(self), fn, args)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        if not self.alive:
            return self.call_at(0, fn, *args)
        return self.scheduler._push(self.scheduler.now, _Timer(self), fn, args)

    def call_soon_threadsafe(self, fn: Callable[..., Any], *args: Any) -> _Timer:
        self._check_alive()
        return self.call_soon(fn, *args)

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        self._check_alive()
        return fn()

    def _check_alive(self) -> None:
        if not self.alive:
            raise ProcessKilled(f"process {self.name} has been killed")

    def kill(self) -> None:
        """The process dies: every timer it armed is cancelled, nothing it arms later runs
        (what waited for a pause to end is dropped too)."""
        if self.alive:
            self.alive = False
            self.scheduler._cancel_owned_by(self)
            self._end_pause()
            self._held = []

    # -- pauses -----------------------------------------------------------------------------
    def pause(self, ms: int | None = None) -> None:
        """Freeze the process (for ``ms`` of virtual time, or until ``resume()``): its timers
        and its arrivals wait; a longer pause already under way is not shortened."""
        if not self.alive:
            return
        until = None if ms is None else self.scheduler.now + ms
        if self.paused:
            old = self._resume_timer
            if old is None or (until is not None and until <= self._resume_at):
                return                              # already paused at least that long
            old.cancel()
        self.paused = True
        self._resume_timer = None
        if until is not None:
            self._resume_timer = self.scheduler.call_at(until, self.resume)
            self._resume_at = until

    def resume(self) -> None:
        """End the pause: what waited runs now, in the order it came due."""
        if not self.paused:
            return
        self._end_pause()
        held, self._held = self._held, []
        self.scheduler._push_first([entry for entry in held if not entry[0].cancelled])

    def _end_pause(self) -> None:
        self.paused = False
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None

    def hold(self, fn: Callable[..., Any], *args: Any) -> None:
        """Keep ``fn(*args)`` (an arrival) until the pause ends, in order with the timers."""
        self._held.append((_Timer(self), fn, args))

    def __repr__(self) -> str:
        state = "paused" if self.paused else "alive" if self.alive else "killed"
        return f"SimProcess({self.name}, {state})"
