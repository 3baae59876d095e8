"""Latency percentiles and one benchmark result row."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank; 0.0 when empty."""
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


@dataclass(slots=True)
class LoadResult:
    """What one load run measured: ``committed`` entries acknowledged in ``seconds``, the
    latency of each acknowledged call (ms; a batch counts once), failed calls."""

    committed: int = 0
    seconds: float = 0.0
    calls: int = 0
    failures: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    failure_codes: dict = field(default_factory=dict)

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        rate = self.committed / self.seconds if self.seconds > 0 else 0.0
        return {"committed": self.committed, "seconds": round(self.seconds, 3),
                "committed_per_s": round(rate, 1), "calls": self.calls, "failures": self.failures,
                "failure_codes": self.failure_codes,
                "p50_ms": round(percentile(lat, 0.50), 3), "p99_ms": round(percentile(lat, 0.99), 3)}


@dataclass(slots=True)
class Row:
    """One configuration's figures, as ``--json`` prints them."""

    system: str            # "dledger" or "pysyncobj"
    via: str               # "embedded" (inside the leader's process) or "client"
    payload: int
    mode: str              # "page_cache" or "fsync"
    load: str              # "rate1000" or "saturation"
    committed_per_s: float
    p50_ms: float
    p99_ms: float
    committed: int = 0
    failures: int = 0
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        extra = out.pop("extra")
        out.update(extra)
        return out


__all__ = ["LoadResult", "Row", "percentile"]
