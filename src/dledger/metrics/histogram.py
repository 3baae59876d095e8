"""Histogram: a fixed-bucket histogram cheap enough for the append path.

One observation is a ``bisect`` and two additions on plain Python numbers: no lock, no label
lookup (prometheus-client's own ``Histogram.observe`` costs several times that). Only the
runtime's thread observes; a scrape reads the counts from another thread, so a snapshot may
miss the observation being made, never more. The count a snapshot reports is the sum of its
buckets, so ``+Inf`` always equals ``_count``.

Bucket bounds are inclusive upper bounds (Prometheus ``le``). The latency buckets are Java
DLedger's (``DLedgerMetricsManager``: 1 us to 10 s), kept here in milliseconds, the unit the
server's clock stamps calls in, and exposed in seconds.
"""

from __future__ import annotations

from bisect import bisect_left

#: Java DLedger's latency buckets, in milliseconds (1 us .. 10 s)
LATENCY_BUCKETS_MS = (0.001, 0.003, 0.005, 0.01, 0.03, 0.05, 0.1, 0.3, 0.5,
                      1, 2, 3, 5, 10, 30, 50, 100, 300, 500, 1000, 3000, 5000, 10000)
#: entries in one append request, push or apply batch
ENTRY_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
#: bytes in one append request or push
BYTE_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)


class Histogram:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds) -> None:
        self.bounds = tuple(bounds)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError("bucket bounds must increase strictly")
        #: one count per bound, then the count above the last bound (+Inf)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0

    def observe(self, value) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_times(self, value, times: int) -> None:
        """``observe(value)`` ``times`` times, at the cost of one (a batch's equal values)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times

    def reset(self) -> None:
        """Start counting afresh (from the observing thread)."""
        self.counts = [0] * len(self.counts)
        self.total = 0

    def snapshot(self, scale: float = 1.0) -> tuple[list[tuple[float, int]], int, float]:
        """``(buckets, count, sum)``: cumulative ``(le, count)`` pairs ending with ``inf``,
        bounds and sum multiplied by ``scale`` (milliseconds to seconds: ``0.001``)."""
        counts = list(self.counts)          # one copy: the buckets and the count agree
        total = self.total
        out, running = [], 0
        for bound, n in zip(self.bounds, counts):
            running += n
            out.append((round(bound * scale, 12), running))
        running += counts[-1]
        out.append((float("inf"), running))
        return out, running, total * scale


__all__ = ["BYTE_BUCKETS", "ENTRY_BUCKETS", "LATENCY_BUCKETS_MS", "Histogram"]
