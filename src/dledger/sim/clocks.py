"""Per-machine clocks for the simulator: drift, jumps, and the drift bound a lease assumes.

A ``SimClock`` maps the simulator's virtual time (the one true time, in ms) to what one machine
reads. It has two faces, as a real machine has:
- the monotonic clock (``now_ms``, what ``time.monotonic`` gives): it runs at ``rate`` local
  milliseconds per virtual millisecond (``1.02`` is 2 % fast) and may jump forward
  (``jump(ms)``, e.g. a VM that was descheduled), never backward;
- the wall clock (``wall_time``, seconds since the epoch): it runs at the same rate and may
  also be stepped either way (``jump_wall(seconds)``, e.g. NTP correcting it).
A timer a process arms is in its local monotonic time; ``to_virtual`` gives the first virtual
millisecond at which the local clock reaches it (the scheduler's heap is in virtual time). A
jump does not move timers already armed: they fire at the virtual time computed when they were
armed, which the process sees as a late timer.

An ideal clock (rate 1, never jumped) reads virtual time exactly, as the simulator always did:
a seed replays unchanged. ``ClockOptions`` is what a swarm draws clocks from; ``max_drift``
is the bound the configuration must state: see ``lease_is_safe``.

The lease bound: a leader serves LEASE_READs for ``lease_ratio * election_timeout`` of its own
time after a quorum confirmed it (from when the confirming round was sent); a follower that
heard the leader joins a new election only after ``election_timeout`` of its own time. With
rates within ``1 +- d``, the lease ends in true time by ``lease_ratio * T / (1 - d)`` and no
new leader can exist before ``T / (1 + d)``, so the lease is safe when
``lease_ratio * (1 + d) < 1 - d``, i.e. ``d < (1 - lease_ratio) / (1 + lease_ratio)``
(about 11 % for the default ratio 0.8). Forward jumps of the monotonic clock are outside that
bound: a follower whose clock jumps by ``J`` may stand for election ``J`` early.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from dledger.config import lease_is_safe, max_safe_drift  # noqa: F401 (the rule lives with the config)

#: the virtual wall clock at virtual time 0 (2023-11-14): earlier than any real file time, so
#: segment files never look old enough for age-based cleaning in a simulation
SIM_EPOCH = 1_700_000_000.0


class SimClock:
    """One machine's clocks over a scheduler's virtual time (see the module docstring)."""

    __slots__ = ("scheduler", "rate", "wall_offset_s", "_base_virtual", "_base_local", "ideal")

    def __init__(self, scheduler, rate: float = 1.0) -> None:
        if not rate > 0:
            raise ValueError(f"a clock's rate must be positive, got {rate!r}")
        self.scheduler = scheduler
        self.rate = float(rate)
        self.wall_offset_s = 0.0
        self._base_virtual = scheduler.now
        self._base_local = float(scheduler.now)
        #: rate 1 and never jumped: local time is virtual time
        self.ideal = rate == 1.0

    def _local(self, virtual_ms: float) -> float:
        return self._base_local + (virtual_ms - self._base_virtual) * self.rate

    def now_ms(self) -> int:
        if self.ideal:
            return self.scheduler.now
        return math.floor(self._local(self.scheduler.now))

    def wall_time(self) -> float:
        if self.ideal:
            return SIM_EPOCH + self.scheduler.now / 1000
        return SIM_EPOCH + self._local(self.scheduler.now) / 1000 + self.wall_offset_s

    def to_virtual(self, local_ms: int) -> int:
        """The first virtual millisecond (not before now) at which ``now_ms()`` reaches ``local_ms``."""
        now = self.scheduler.now
        if self.ideal:
            return max(int(local_ms), now)
        t = self._base_virtual + math.ceil((local_ms - self._base_local) / self.rate)
        while math.floor(self._local(t)) < local_ms:    # float rounding: never early ...
            t += 1
        while t > now and math.floor(self._local(t - 1)) >= local_ms:     # ... nor late
            t -= 1
        return max(t, now)

    # -- faults -----------------------------------------------------------------------------
    def _rebase(self) -> None:
        now = self.scheduler.now
        self._base_local = self._local(now)
        self._base_virtual = now
        self.ideal = False

    def set_rate(self, rate: float) -> None:
        """From now on, run at ``rate`` local ms per virtual ms."""
        if not rate > 0:
            raise ValueError(f"a clock's rate must be positive, got {rate!r}")
        self._rebase()
        self.rate = float(rate)

    def jump(self, ms: int) -> None:
        """The monotonic clock (and the wall clock with it) leaps ``ms`` forward."""
        if ms < 0:
            raise ValueError("the monotonic clock never goes back; use jump_wall")
        self._rebase()
        self._base_local += ms

    def jump_wall(self, seconds: float) -> None:
        """Step the wall clock only, either way (the monotonic clock does not move)."""
        self._rebase()
        self.wall_offset_s += seconds

    def __repr__(self) -> str:
        return f"SimClock(rate={self.rate}, now_ms={self.now_ms()})"


@dataclass(slots=True)
class ClockOptions:
    """What a swarm draws each machine's clock from; the defaults keep every clock ideal."""

    #: every clock's rate is in ``[1 - max_drift, 1 + max_drift]`` (0.02: +-2 %)
    max_drift: float = 0.0
    #: largest forward jump of a monotonic clock (0: none); breaks the lease bound, see above
    max_jump_ms: int = 0
    #: largest step of a wall clock, either way (0: none)
    max_wall_jump_s: float = 0.0

    def draw_rate(self, rng: random.Random) -> float:
        return 1.0 if not self.max_drift else 1.0 + rng.uniform(-self.max_drift, self.max_drift)

    def jolt(self, clock: SimClock, rng: random.Random) -> None:
        """One clock fault, drawn from ``rng``: a forward jump and/or a wall-clock step."""
        if self.max_jump_ms:
            clock.jump(rng.randrange(self.max_jump_ms + 1))
        if self.max_wall_jump_s:
            clock.jump_wall(rng.uniform(-self.max_wall_jump_s, self.max_wall_jump_s))
