"""The replica audit: compare the logs of several replicas entry by entry with a Spark job.

``run_audit(paths, ...) -> AuditReport``; the command ``dledger audit <dir> <dir> ...`` is
``dledger.spark.audit_cli``.

What is compared: every intact entry's (term, pos, size, magic, CRC-32 of the body as read);
the CRC is recomputed, so bodies are compared even in Java-written stores, whose stored
``bodyCrc`` is 0. Damaged entries (CRC mismatch, or a record that fails its checks) are
reported as corrupt and left out of the comparison.

What is reported (``AuditReport``):
- per replica: first and last index, last term, committed index (from its checkpoint), entry
  and segment counts, corrupt entries, and how far it lags behind the longest log;
- the common prefix (all replicas hold the same entries up to it) and the common committed
  prefix (the part of it at or below the highest committed index any replica knows);
- divergent entries (replicas hold different entries at one index) and gaps (an index inside
  every replica's range that some replica does not hold intact);
- the verdict and exit code: 1 when replicas that all count an index as committed hold different
  entries there (a safety violation: committed entries never change); else 4 (unknown) when
  replicas differ and no replica knows its committed index (no checkpoint, as in Java
  stores); else 3 when some entry is corrupt; else 0. A lagging replica or a divergent uncommitted tail is normal Raft life
  (the leader repairs it) and is reported without failing the audit.

The rule for "committed": a replica counts index ``i`` as committed when ``i`` is at or below
its own committed index (``--committed N`` applies one value to all). A follower that still
holds a stale, uncommitted entry where the leader committed another one is not a violation,
because that follower does not count the index as committed yet.

Output: ``audit.json`` (the report) and ``audit.png`` (entries per segment per replica, with
divergence and corruption markers) in ``out_dir``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field

from dledger.entry import segment_name
from dledger.spark import compare, scan

from dledger.spark.exit_codes import (EXIT_CORRUPT, EXIT_DIVERGED, EXIT_ERROR,  # noqa: F401
                                      EXIT_OK, EXIT_UNKNOWN)

#: how many divergent / corrupt entries are listed in detail
MAX_LISTED = 100


@dataclass
class ReplicaSummary:
    replica: str
    path: str
    first: int | None
    last: int | None
    last_term: int | None
    committed: int
    entries: int
    segments: int
    corrupt: int
    lag: int = 0
    open_error: str | None = None
    #: the index range of each term held intact: [{"term", "first", "last", "entries"}, ...]
    #: in log order; a new term is a new leader (a failover or a restart)
    terms: list = field(default_factory=list)


@dataclass
class AuditReport:
    replicas: list[ReplicaSummary]
    committed_index: int
    common_prefix_end: int
    common_committed_prefix_end: int
    divergent_count: int
    divergent_first: int | None
    committed_divergent_count: int
    committed_divergent_first: int | None
    divergent: list[dict]
    gap_count: int
    lagging: list[dict]
    corrupt_count: int
    corrupt: list[dict]
    segments: list[dict]
    verdict: str
    exit_code: int
    seconds: float = 0.0
    #: where the time went, in seconds: opening the stores (driver side), the Spark session,
    #: the scan with the per-segment job, the per-index comparison, the divergent detail, the
    #: chart and JSON
    timings: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary_lines(self) -> list[str]:
        lines = [f"audit of {len(self.replicas)} replicas: {self.verdict}"]
        for r in self.replicas:
            extra = f", cannot open: {r.open_error}" if r.open_error else ""
            lines.append(f"  {r.replica}: entries {r.first}..{r.last} ({r.entries}), last term "
                         f"{r.last_term}, committed {r.committed}, lag {r.lag}, corrupt {r.corrupt}"
                         f"{extra}")
        lines.append(f"  common prefix up to {self.common_prefix_end}; committed index "
                     f"{self.committed_index}; common committed prefix up to "
                     f"{self.common_committed_prefix_end}")
        if self.divergent_count:
            lines.append(f"  divergent entries: {self.divergent_count} from index "
                         f"{self.divergent_first} ({self.committed_divergent_count} inside the "
                         f"committed prefix)")
        if self.gap_count:
            lines.append(f"  gaps: {self.gap_count} indexes not held intact by every replica")
        for lag in self.lagging:
            lines.append(f"  lagging: {lag['replica']} is {lag['behind']} entries behind "
                         f"(last {lag['last']})")
        if self.corrupt_count:
            lines.append(f"  corrupt entries: {self.corrupt_count}")
            for c in self.corrupt[:10]:
                lines.append(f"    {c['replica']} index {c['index']} at pos {c['pos']} "
                             f"(segment {segment_name(c['segment'])}): {c['error'] or 'body CRC mismatch'}")
        for k, v in self.outputs.items():
            lines.append(f"  {k}: {v}")
        if self.timings:
            laps = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
            lines.append(f"  time: {laps} (total {self.seconds:.1f} s)")
        return lines


def run_audit(paths: list[str], *, master: str | None = None, out_dir: str | None = None,
              spark=None, committed: int | None = None, names: list[str] | None = None,
              max_listed: int = MAX_LISTED, recover: bool = True) -> AuditReport:
    """Audit the replicas at ``paths`` (see the module docstring); writes JSON and PNG to
    ``out_dir`` when given. Uses ``spark`` when given, else ``session.get_session(master)``."""
    from pyspark.sql import functions as F

    from dledger.spark.session import get_session

    t0 = time.perf_counter()
    if len(paths) < 2:
        raise ValueError("an audit compares at least two replicas")
    names = list(names) if names else scan.replica_names(paths)
    if len(set(names)) != len(names):
        raise ValueError(f"replica names must differ: {names}")
    infos = [scan.store_info(p, n, recover=recover) for p, n in zip(paths, names)]
    clock = _Clock(t0)
    clock.mark("open stores")
    owned = False
    if spark is None:
        if out_dir:   # the chart's imports (about a second) while the JVM starts
            threading.Thread(target=_import_chart, daemon=True).start()
        # the audit reads the stores with mapInArrow (``entries_frame``), not the data sources
        spark, owned = get_session(master, "dledger-audit", sources=False)
    clock.mark("session")
    try:
        report = _audit(spark, F, paths, names, infos, committed, max_listed, clock)
    except BaseException:
        if owned:
            spark.stop()
        raise
    stopping = None
    if owned:   # the JVM shuts down while the chart is drawn
        stopping = threading.Thread(target=spark.stop)
        stopping.start()
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, "audit.png")
        json_path = os.path.join(out_dir, "audit.json")
        from dledger.spark.chart import draw_audit_chart
        draw_audit_chart(report, png)
        clock.mark("chart")
        report.outputs = {"json": json_path, "chart": png}
        with open(json_path, "w") as f:
            json.dump(report.to_dict(), f, indent=2)
            f.write("\n")
        clock.mark("json")
    if stopping is not None:
        stopping.join()
        clock.mark("stop session")
    report.timings = clock.laps
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def entries_frame(spark, infos: list[scan.StoreInfo], lo: int | None = None,
                  hi: int | None = None):
    """The header rows (``scan.HEADER_DDL``, CRC-32 checked) of the entries ``[lo, hi)`` of the
    stores ``infos``, read with ``mapInArrow`` over one row per segment.

    The same rows as ``spark.read.format("dledger").option("body", "false").load(paths)``
    (with the index range pushed down), without what a Python data source costs each query:
    Spark runs ``schema()`` and ``partitions()`` in Python processes of their own on the
    driver, and registering a data source makes it look for others in a third one. Here the
    stores were opened once, on the driver (``infos``), the segments are planned there, and
    only the executors' Python workers run, each importing ``dledger.spark.scan`` alone.
    """
    from functools import partial

    tasks = scan.plan_segments(infos, lo, hi)
    ids = spark.range(0, len(tasks), 1, max(1, len(tasks)))
    read = partial(scan.read_tasks, tasks=tasks, lo=lo, hi=hi, body=False, verify=True)
    return ids.mapInArrow(read, scan.HEADER_DDL)


def _import_chart() -> None:
    try:
        import dledger.spark.chart  # noqa: F401
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:   # reported where the chart is drawn
        pass


#: ``grouping_id()`` of the per replica, segment and term rows
SEGMENT_SET = compare.SEGMENT_SET


class _TaskFindings:
    """What the tasks found, one index range each, all replicas together
    (``dledger.spark.compare``): no shuffle, and a few rows per segment to collect."""

    def __init__(self, spark, infos, committed: list[int], max_listed: int) -> None:
        from functools import partial

        bounds = compare.ranges(infos)
        tasks = max(0, len(bounds) - 1)
        run = partial(compare.compare_tasks, infos=infos, committed=committed, bounds=bounds,
                      max_listed=max_listed)
        rows = (spark.range(0, tasks, 1, max(1, tasks)).mapInArrow(run, compare.RESULT_DDL)
                .collect())
        self.max_listed = max_listed
        self.by_kind: dict[int, list] = {}
        for r in rows:
            self.by_kind.setdefault(r["gid"], []).append(r)
        self.seg_rows = self.by_kind.get(SEGMENT_SET, [])

    def summary(self, lo: int, hi_common: int) -> tuple[dict, list]:
        stats = self.by_kind.get(compare.STATS, [])
        firsts = [r["divergent_first"] for r in stats if r["divergent_first"] is not None]
        vfirsts = [r["violation_first"] for r in stats if r["violation_first"] is not None]
        gaps = sum(max(0, min(r["last"], hi_common) - max(r["first"], lo) + 1)
                   for r in self.by_kind.get(compare.SHORT_RUN, []))
        listed = sorted((r["index"], bool(r["violation"]))
                        for r in self.by_kind.get(compare.INDEX_SET, []))[:self.max_listed]
        return ({"div": sum(r["divergent"] for r in stats),
                 "div_first": min(firsts) if firsts else None,
                 "viol": sum(r["violations"] for r in stats),
                 "viol_first": min(vfirsts) if vfirsts else None, "gaps": gaps}, listed)


class _ShuffleFindings:
    """The same findings from one scan of every segment and one shuffle, for stores whose
    valid range is unknown (opened without recovery, or not at all), which cannot be split
    into index ranges. A single aggregation with two grouping sets computes, per index, the
    copies' fingerprints and, per replica, segment and term, counts, index ranges and damage;
    only the segment rows and the indexes where copies differ or some replica lacks an intact
    copy are kept (checkpointed in the JVM), and the small jobs after it read that."""

    def __init__(self, F, df, names, committed: dict, max_listed: int) -> None:
        n = len(names)
        cmap = F.create_map(*[x for name in names
                              for x in (F.lit(name), F.lit(committed[name]))])
        bad = (F.col("error").isNotNull()) | (~F.col("crc_ok"))
        fp = F.xxhash64(*compare.SAME_ENTRY)   # what is compared per entry
        intact_fp = F.when(~bad, fp)
        committed_fp = F.when(~bad & (F.col("index") <= cmap[F.col("replica")]), fp)
        agg = (df.groupingSets([["index"], ["replica", "segment", "term"]],
                               "index", "replica", "segment", "term")
               .agg(F.grouping_id().alias("gid"),
                    F.count(F.lit(1)).alias("entries"),
                    F.min("index").alias("first"), F.max("index").alias("last"),
                    F.sum(F.when(bad, 1).otherwise(0)).alias("corrupt"),
                    F.count(intact_fp).alias("copies"),
                    F.min(intact_fp).alias("fp_lo"), F.max(intact_fp).alias("fp_hi"),
                    F.min(committed_fp).alias("cfp_lo"), F.max(committed_fp).alias("cfp_hi")))
        self.F = F
        self.max_listed = max_listed
        self.per_segment = F.col("gid") == SEGMENT_SET
        self.differ = F.col("fp_lo") != F.col("fp_hi")
        self.violation = F.col("cfp_lo") != F.col("cfp_hi")
        self.short = (F.col("copies") < n) & (F.col("copies") > 0)
        self.kept = (agg.where(self.per_segment | self.differ | self.short)
                     .localCheckpoint(eager=True))
        self.seg_rows = self.kept.where(self.per_segment).collect()

    def summary(self, lo: int, hi_common: int) -> tuple[dict, list]:
        F, differ, violation = self.F, self.differ, self.violation
        flagged = self.kept.where(~self.per_segment)
        gap = self.short & F.col("index").between(lo, hi_common)
        stats = flagged.agg(
            F.sum(F.when(differ, 1).otherwise(0)).alias("div"),
            F.min(F.when(differ, F.col("index"))).alias("div_first"),
            F.sum(F.when(violation, 1).otherwise(0)).alias("viol"),
            F.min(F.when(violation, F.col("index"))).alias("viol_first"),
            F.sum(F.when(gap, 1).otherwise(0)).alias("gaps")).first()
        first_rows = (flagged.where(differ).select("index", violation.alias("v"))
                      .orderBy("index").limit(self.max_listed))
        listed = [(r["index"], bool(r["v"])) for r in first_rows.collect()]
        return stats.asDict(), listed



class _Clock:
    """Lap times for ``AuditReport.timings``."""

    def __init__(self, t0: float) -> None:
        self.last = t0
        self.laps: dict[str, float] = {}

    def mark(self, what: str) -> None:
        now = time.perf_counter()
        self.laps[what] = round(self.laps.get(what, 0.0) + now - self.last, 3)
        self.last = now


def _audit(spark, F, paths, names, infos, committed_override, max_listed,
           clock) -> AuditReport:
    n = len(paths)
    df = entries_frame(spark, infos)
    committed = {}
    for name, info in zip(names, infos):
        c = committed_override if committed_override is not None else info.committed
        committed[name] = -1 if c is None else c
    if compare.can_split(infos):
        found = _TaskFindings(spark, infos, [committed[name] for name in names], max_listed)
    else:
        found = _ShuffleFindings(F, df, names, committed, max_listed)
    clock.mark("scan and aggregation")
    seg_rows = found.seg_rows

    per_replica = {name: {"entries": 0, "first": None, "last": None, "corrupt": 0, "segments": 0}
                   for name in names}
    by_segment: dict[tuple, dict] = {}
    term_rows: dict[str, dict] = {name: {} for name in names}
    for r in seg_rows:
        s = per_replica[r["replica"]]
        s["entries"] += r["entries"]
        s["corrupt"] += r["corrupt"]
        s["first"] = r["first"] if s["first"] is None else min(s["first"], r["first"])
        s["last"] = r["last"] if s["last"] is None else max(s["last"], r["last"])
        key = (r["replica"], r["segment"])
        seg = by_segment.setdefault(key, {"replica": r["replica"], "segment": r["segment"],
                                          "entries": 0, "first": r["first"], "last": r["last"],
                                          "corrupt": 0})
        seg["entries"] += r["entries"]
        seg["corrupt"] += r["corrupt"]
        seg["first"], seg["last"] = min(seg["first"], r["first"]), max(seg["last"], r["last"])
        if r["term"] is not None and r["copies"]:
            t = term_rows[r["replica"]].setdefault(
                r["term"], {"term": r["term"], "first": r["first"], "last": r["last"],
                            "entries": 0})
            t["entries"] += r["copies"]
            t["first"], t["last"] = min(t["first"], r["first"]), max(t["last"], r["last"])
    for (replica, _), seg in by_segment.items():
        per_replica[replica]["segments"] += 1
    segments = sorted(by_segment.values(), key=lambda s: (s["replica"], s["segment"]))
    terms = {name: sorted(rows.values(), key=lambda t: t["first"])
             for name, rows in term_rows.items()}
    corrupt_count = sum(s["corrupt"] for s in per_replica.values())
    corrupt = []
    if corrupt_count:   # damage is rare: list it with a second scan only when there is some
        bad = F.col("error").isNotNull() | ~F.col("crc_ok")
        rows = (df.where(bad).select("replica", "segment", "index", "pos", "error")
                .orderBy("index", "replica").limit(max_listed).collect())
        corrupt = [{"replica": r["replica"], "segment": r["segment"], "index": r["index"],
                    "pos": r["pos"], "error": r["error"]} for r in rows]
    clock.mark("segments and damage")

    firsts = [s["first"] for s in per_replica.values() if s["first"] is not None]
    lasts = [s["last"] if s["last"] is not None else -1 for s in per_replica.values()]
    lo = max(firsts) if len(firsts) == n else 0
    hi_common = min(lasts)

    stats, listed = found.summary(lo, hi_common)
    divergent_count = int(stats["div"] or 0)
    clock.mark("per-index comparison")
    divergent = []
    if listed:
        idx = [i for i, _ in listed]
        detail = (entries_frame(spark, infos, idx[0], idx[-1] + 1)
                  .where(F.col("index").isin(idx))
                  .select("replica", "segment", "index", "term", "pos", "size", "magic", "crc",
                          "crc_ok", "error").collect())
        by_index: dict[int, list] = {}
        for r in detail:
            by_index.setdefault(r["index"], []).append(
                {"replica": r["replica"], "segment": r["segment"], "term": r["term"],
                 "pos": r["pos"], "size": r["size"], "magic": r["magic"], "crc": r["crc"],
                 "intact": bool(r["crc_ok"]) and r["error"] is None,
                 "counts_as_committed": r["index"] <= committed[r["replica"]]})
        for i, v in listed:
            copies = sorted(by_index.get(i, []), key=lambda c: c["replica"])
            divergent.append({"index": i, "inside_committed_prefix": v, "copies": copies})

    clock.mark("divergent detail")
    max_last = max(lasts)
    summaries = []
    for name, path, info in zip(names, paths, infos):
        s = per_replica[name]
        summaries.append(ReplicaSummary(
            replica=name, path=path, first=s["first"], last=s["last"],
            last_term=info.end_term, committed=committed[name], entries=s["entries"],
            segments=s["segments"], corrupt=s["corrupt"],
            lag=max_last - (s["last"] if s["last"] is not None else -1),
            open_error=info.error, terms=terms[name]))
        if summaries[-1].last_term is None and terms[name]:
            summaries[-1].last_term = terms[name][-1]["term"]
    lagging = [{"replica": s.replica, "last": s.last, "behind": s.lag}
               for s in summaries if s.lag > 0]
    committed_index = max(committed.values())
    common_end = hi_common
    if stats["div_first"] is not None:
        common_end = min(common_end, stats["div_first"] - 1)
    viol = int(stats["viol"] or 0)
    if viol:
        verdict, code = (f"DIVERGED: {viol} entries differ inside the committed prefix "
                         f"(first at index {stats['viol_first']})"), EXIT_DIVERGED
    elif divergent_count and committed_index < 0:
        verdict, code = (f"UNKNOWN: {divergent_count} entries differ from index "
                         f"{stats['div_first']} and no replica knows its committed index "
                         f"(no checkpoint); pass --committed N to decide"
                         + (f"; {corrupt_count} damaged entries" if corrupt_count else "")
                         ), EXIT_UNKNOWN
    elif corrupt_count:
        verdict, code = f"CORRUPT: {corrupt_count} damaged entries", EXIT_CORRUPT
    else:
        notes = []
        if divergent_count:
            notes.append(f"{divergent_count} divergent uncommitted entries")
        if lagging:
            notes.append(f"{len(lagging)} lagging replicas")
        verdict, code = "OK" + (f" ({', '.join(notes)})" if notes else ""), EXIT_OK
    return AuditReport(
        replicas=summaries, committed_index=committed_index, common_prefix_end=common_end,
        common_committed_prefix_end=min(common_end, committed_index),
        divergent_count=divergent_count, divergent_first=stats["div_first"],
        committed_divergent_count=viol, committed_divergent_first=stats["viol_first"],
        divergent=divergent, gap_count=int(stats["gaps"] or 0), lagging=lagging,
        corrupt_count=corrupt_count, corrupt=corrupt[:max_listed], segments=segments,
        verdict=verdict, exit_code=code)
