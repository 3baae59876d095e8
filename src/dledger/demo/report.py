"""The demo's output: the printed figures, the latency-over-time chart, the Spark audit.

``print_report(result, out)`` prints one line per figure (the ``DemoResult`` of
``dledger.demo``); commit latency is given for the steady state, apart from the failover
window and the start-up (``latency_windows``). ``write_chart(path, load, failover)`` draws each acknowledged batch's commit
latency against time, with the start-up stall (before the first acknowledgement), the SIGKILL,
the first acknowledgement by the new leader and the restart marked, over the committed entries
per second (matplotlib, Agg backend; returns None
when matplotlib is missing). ``run_audit(store_dirs, out_dir, out)`` runs the Spark replica
audit and returns its exit code.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from dledger.demo.failover import Failover
from dledger.demo.load import LoadResult
from dledger.spark import install_hint

#: why the client's resends cannot duplicate an entry (printed with the duplicate count)
RESEND_RULE = ("the client resends an append only when it certainly was not taken (connection refused, "
               "NOT_LEADER, LEADER_TRANSFERRING, LEADER_PENDING_FULL); an append whose answer was lost is "
               "reported as unknown and never resent")


def percentile_ms(load: LoadResult, q: float, acks=None) -> float:
    """The ``q`` quantile of commit latency over acknowledged entries (each batch weighs its
    size): of ``acks`` when given (a window's), else of every acknowledgement."""
    pairs = sorted((a.latency_s, a.entries) for a in (load.acks if acks is None else acks))
    total = sum(n for _l, n in pairs)
    if not total:
        return 0.0
    rank, seen = q * total, 0
    for latency, n in pairs:
        seen += n
        if seen >= rank:
            return latency * 1000
    return pairs[-1][0] * 1000


class LatencyWindows(NamedTuple):
    """The acknowledgements of a run split by when their batch was sent:
    - ``startup``: sent before the first acknowledgement came (connections made, the leader's
      first pushes; their latency is the start-up stall, not the group's);
    - ``failover``: answered after the leader's SIGKILL and sent before the new leader's first
      acknowledgement (they waited for the election);
    - ``steady``: the rest."""

    startup: list
    failover: list
    steady: list
    first_ack_s: float | None


def latency_windows(load: LoadResult, failover: Failover) -> LatencyWindows:
    acks = load.acks
    first = min((a.t_s for a in acks), default=None)
    new = failover.new_leader_ack(acks) if failover.killed_t is not None else None
    startup, during, steady = [], [], []
    for a in acks:
        sent = a.t_s - a.latency_s
        if first is not None and sent < first:
            startup.append(a)
        elif failover.killed_t is not None and a.t_s >= failover.killed_t and (new is None or sent < new.t_s):
            during.append(a)
        else:
            steady.append(a)
    return LatencyWindows(startup, during, steady, first)


def print_report(r, out) -> None:
    line = lambda label, text: print(f"{label:<21}: {text}", file=out)  # noqa: E731
    line("cluster", f"3 node processes on 127.0.0.1 ({r.peers}); logs and stores in {r.out_dir}")
    line("entries acknowledged", f"{r.acknowledged:,} of {r.entries:,} (batches of {r.batch}, {r.in_flight} in flight; "
         f"{r.retried:,} sent again after no leader took them)")
    line("entries lost", f"{r.lost:,} (acknowledged entries missing or different on a replica)")
    line("throughput", f"{r.throughput:,.0f} committed entries/s over {r.wall_s:.2f} s")
    line("commit latency", f"p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms in steady state (per entry: its batch "
         f"sent to acknowledged; {r.steady_entries:,} entries)")
    if r.failover_entries:
        line("  failover window", f"p99 {r.failover_p99_ms:.0f} ms, max {r.failover_max_ms:.0f} ms ({r.failover_entries:,} "
             f"entries answered after the kill and sent before the new leader's first acknowledgement)")
    if r.first_ack_ms is not None:
        line("  start-up", f"first acknowledgement {r.first_ack_ms:.0f} ms after the first append "
             f"({r.startup_entries:,} entries sent before it, not in the figures above)")
    if r.killed is None:
        line("time without a leader", "not measured: no leader was killed")
    else:
        leaderless = "no acknowledgement after the kill" if r.leaderless_ms is None else f"{r.leaderless_ms:.0f} ms"
        line("time without a leader", f"{leaderless} (leader {r.killed} SIGKILLed at {r.killed_t:.2f} s, 40 %; "
             f"first acknowledgement by {r.new_leader or '-'}; {r.killed} restarted at {r.restarted_t:.2f} s, 70 %, "
             f"and caught up)")
    line("outcome unknown", f"{r.unknown:,} entries in {r.unknown_calls} calls: {r.unknown_in_log:,} found in the log "
         f"once, {r.unknown_absent:,} not in it (never acknowledged, so never counted as lost)")
    line("entries duplicated", f"{r.duplicated:,} by client retries ({RESEND_RULE})")
    codes = " ".join(f"{k}={v}" for k, v in r.exit_codes.items())
    line("nodes stopped", f"SIGTERM, exit codes {codes}")
    line("replicas verified", f"{'OK' if r.verified else 'FAILED'} ({len(r.store_dirs)} stores reopened read-only, "
         f"indexes up to {r.checked_to:,} compared byte for byte, in {r.verify_s:.1f} s)")
    for p in r.problems:
        print(f"  - {p}", file=out)
    line("latency chart", r.chart or f"not written (matplotlib is missing: {install_hint()})")
    line("store directories", " ".join(r.store_dirs))


def write_chart(path: str, load: LoadResult, failover: Failover) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    acks = load.acks
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    ax.scatter([a.t_s for a in acks], [max(a.latency_s * 1000, 1e-3) for a in acks], s=4, alpha=0.6,
               color="tab:blue", label="commit latency of a batch")
    ax.set_yscale("log")
    ax.set_ylabel("commit latency (ms, log scale)")
    ax.set_title(f"dledger demo: {load.acknowledged:,} entries acknowledged by 3 node processes, "
                 "leader SIGKILLed and restarted")
    last = max((a.t_s for a in acks), default=0.0)
    step = max(0.1, round(last / 100, 1))          # about a hundred bins, 100 ms at least
    end = last + step
    bins = [0] * (int(end / step) + 1)
    for a in acks:
        bins[int(a.t_s / step)] += a.entries
    bx.plot([k * step for k in range(len(bins))], [n / step for n in bins], color="tab:green", drawstyle="steps-post")
    bx.set_ylabel("committed entries/s")
    bx.set_xlabel("seconds since the first append")
    first = failover.new_leader_ack(acks)
    first_ack = min((a.t_s for a in acks), default=None)
    for axis in (ax, bx):
        if first_ack is not None and first_ack > 0:
            axis.axvspan(0, first_ack, color="tab:gray", alpha=0.15,
                         label=f"start-up: first acknowledgement after {first_ack * 1000:.0f} ms")
        if failover.killed_t is not None:
            axis.axvline(failover.killed_t, color="tab:red", linestyle="--",
                         label=f"SIGKILL of leader {failover.killed}")
            if first is not None:
                axis.axvspan(failover.killed_t, first.t_s, color="tab:red", alpha=0.12,
                             label=f"no leader: {(first.t_s - failover.killed_t) * 1000:.0f} ms")
        if failover.restarted_t is not None:
            axis.axvline(failover.restarted_t, color="tab:purple", linestyle=":",
                         label=f"{failover.killed} restarted from its store")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    bx.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_audit(store_dirs: list[str], out_dir: str, out) -> int:
    """The Spark replica audit over the three stores; its exit code (0: sound)."""
    try:
        from dledger.spark.audit import run_audit as spark_audit
    except ImportError as exc:  # the spark extra is not installed
        print(f"replica audit        : skipped ({exc}; {install_hint()})", file=out)
        return 0
    print("replica audit        : running on Spark (local[*]) ...", file=out, flush=True)
    t0 = time.perf_counter()
    report = spark_audit(store_dirs, out_dir=out_dir)
    for text in report.summary_lines():
        print(f"  {text}", file=out)
    print(f"replica audit        : exit {report.exit_code} in {time.perf_counter() - t0:.1f} s; "
          f"report and chart in {out_dir}", file=out)
    return report.exit_code
