"""RoundTrips: how slow the links to the other members have been lately.

A vote round counts only the answers that come within it. With the default heartbeat interval
(100 ms) as the round's length, links slower than about 50 ms one way (a WAN, a congested
network) made every round end before its answers came, and a cluster could stay leaderless
for as long as the slowness lasted. The node records the round trip of every answer it
matches to a request (answers that come after their round ended included), and a vote round
lasts one and a half times the slowest recent round trip when that is longer than the
heartbeat interval; never longer than an election timeout, which protocol-aware recovery
relies on (a round that started before a restart is over one election timeout after it).

The estimate is the largest sample, decayed by an eighth at each new sample, so one slow
answer lengthens the next rounds at once and a run of fast answers brings it back down.
"""

from __future__ import annotations


class RoundTrips:
    __slots__ = ("slowest_ms",)

    def __init__(self) -> None:
        #: the slowest recent round trip, decayed (0: none seen yet)
        self.slowest_ms = 0

    def record(self, rtt_ms: int) -> None:
        """An answer came ``rtt_ms`` after its request was sent."""
        if rtt_ms < 0:
            return
        decayed = self.slowest_ms - self.slowest_ms // 8
        self.slowest_ms = rtt_ms if rtt_ms > decayed else decayed

    def round_ms(self, floor_ms: int, cap_ms: int) -> int:
        """How long a round of requests should wait for its answers: at least ``floor_ms``,
        one and a half times the slowest recent round trip, at most ``cap_ms``."""
        want = self.slowest_ms + self.slowest_ms // 2
        return min(cap_ms, max(floor_ms, want))
