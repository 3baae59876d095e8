"""The main job (``dledger demo``, ``make run``): a 3-node cluster of OS processes under load,
its leader SIGKILLed mid-stream, then every acknowledged entry checked on every replica.

1. starts n0, n1, n2 as three ``dledger node`` processes on free loopback ports, with a
   generated secret, stores and logs in the output folder, and waits until all three follow
   one leader (``cluster``);
2. appends ``entries`` unique entries through ``AsyncDLedgerClient`` (``batch_append``,
   several batches in flight), with a progress bar (``load``);
3. at 40 % (once both followers hold the leader's log) it SIGKILLs the leader's process; the
   appends go on through the new leader; at 70 %
   it starts the killed node again from its store (``failover``); when every entry is decided
   it waits until all three logs reach the last acknowledged index;
4. stops the nodes with SIGTERM (each must exit with 0), reopens each store read-only and
   checks every acknowledged entry, byte for byte, on all three replicas, and looks up every
   append whose outcome was unknown (``verify``);
5. prints the figures, writes ``latency.png`` (latency over time with the kill and the restart
   marked) and, when asked, runs the Spark replica audit (``report``).

``run_demo(...)`` returns a ``DemoResult``; ``main(args)`` returns 0 when every check passed,
1 when one failed, 2 for a bad argument.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

from dledger.client import AsyncDLedgerClient
from dledger.demo.cluster import GROUP, IDS, ClusterError, NodeProcesses
from dledger.demo.failover import Failover
from dledger.demo.load import LoadResult, LoadStalled, run_load
from dledger.demo.report import latency_windows, percentile_ms, print_report, run_audit, write_chart
from dledger.demo.verify import Verification, verify_replicas

CLIENT_TIMEOUT_S = 5.0
CATCH_UP_S = 60.0


class DemoSetupError(ValueError):
    """The output folder cannot be used (it names the folder and why)."""


@dataclass
class DemoResult:
    ok: bool = False
    entries: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    unknown: int = 0
    unknown_calls: int = 0
    unknown_in_log: int = 0
    unknown_absent: int = 0
    retried: int = 0
    batch: int = 0
    in_flight: int = 0
    wall_s: float = 0.0
    throughput: float = 0.0
    #: commit latency in steady state (outside the start-up and the failover window)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    steady_entries: int = 0
    #: the failover window: answered after the kill, sent before the new leader's first answer
    failover_p99_ms: float = 0.0
    failover_max_ms: float = 0.0
    failover_entries: int = 0
    #: the first acknowledgement, in ms after the first append, and the entries sent before it
    first_ack_ms: float | None = None
    startup_entries: int = 0
    leaderless_ms: float | None = None
    killed: str | None = None
    new_leader: str | None = None
    killed_t: float | None = None
    restarted_t: float | None = None
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    verified: bool = False
    checked_to: int = -1
    verify_s: float = 0.0
    peers: str = ""
    out_dir: str = ""
    store_dirs: list[str] = field(default_factory=list)
    chart: str | None = None
    problems: list[str] = field(default_factory=list)
    audit_exit: int | None = None
    load: LoadResult | None = None


async def _drive(nodes: NodeProcesses, entries: int, failover: Failover, *, body_size: int, batch: int,
                 in_flight: int, progress: bool) -> tuple[LoadResult, dict[str, int | None]]:
    """Wait until the three nodes follow one leader, run the load with the fault plan, restart
    the killed node if the load ended first, wait for the catch-up."""
    client = AsyncDLedgerClient(nodes.peers, GROUP, secret=nodes.secret, timeout_s=CLIENT_TIMEOUT_S)
    try:
        await nodes.wait_formed(30.0)       # every node follows one leader before the load
        load = await run_load(client, entries, body_size=body_size, batch=batch, in_flight=in_flight,
                              schedule=failover, progress=progress,
                              hold_at=failover.hold_at(batch, in_flight))
        failover.restart(load)
        ends = await nodes.wait_caught_up(load.last_index, CATCH_UP_S)
    finally:
        await client.close()
    return load, ends


def _refuse_old_stores(out_dir: str) -> None:
    old = [d for d in (f"dledger-{i}" for i in IDS) if os.path.exists(os.path.join(out_dir, d))]
    if old:
        raise DemoSetupError(f"{out_dir} already holds {', '.join(old)} from an earlier run: remove it "
                         f"or choose another --dir")


def run_demo(base_dir: str | None = None, entries: int = 200_000, *, body_size: int = 128, batch: int = 128,
             in_flight: int = 8, heartbeat_ms: int = 100, progress: bool = True, out=sys.stdout,
             audit: bool = False, chart: bool = True) -> DemoResult:
    keep = base_dir is not None
    out_dir = os.path.abspath(base_dir) if keep else tempfile.mkdtemp(prefix="dledger-demo-")
    os.makedirs(out_dir, exist_ok=True)
    _refuse_old_stores(out_dir)
    t_start = time.perf_counter()
    r = DemoResult(entries=entries, batch=batch, in_flight=in_flight, out_dir=out_dir)
    try:
        with NodeProcesses(out_dir, heartbeat_ms=heartbeat_ms) as nodes:
            r.peers, r.store_dirs = nodes.peers, nodes.store_dirs
            nodes.start_all()
            failover = Failover(nodes, entries)
            load, ends = asyncio.run(_drive(nodes, entries, failover, body_size=body_size, batch=batch,
                                            in_flight=in_flight, progress=progress))
            r.exit_codes = nodes.terminate_all()
            for node_id, code in r.exit_codes.items():
                if code != 0:
                    r.problems.append(f"{node_id} exited with {code} after SIGTERM: {nodes.log_tail(node_id)}")
            if any(e is None or e < load.last_index for e in ends.values()):
                r.problems.append(f"not every log reached index {load.last_index} within {CATCH_UP_S:g} s: {ends}")
    except (ClusterError, LoadStalled) as exc:
        r.problems.append(str(exc))
        for node_id in IDS:
            tail = _log_tail(os.path.join(out_dir, f"{node_id}.log"))
            if tail:
                r.problems.append(f"{node_id}.log ends with: {tail}")
        _finish(r, None, None, t_start, keep, out)
        return r
    _fill(r, load, failover)
    t_verify = time.perf_counter()
    v = verify_replicas(r.store_dirs, load)
    r.verify_s = time.perf_counter() - t_verify
    _fill_verification(r, v)
    if chart:
        r.chart = write_chart(os.path.join(out_dir, "latency.png"), load, failover)
    print_report(r, out)
    if audit:
        r.audit_exit = run_audit(r.store_dirs, os.path.join(out_dir, "audit"), out)
        if r.audit_exit != 0:
            r.problems.append(f"the replica audit exited with {r.audit_exit}")
    _finish(r, load, v, t_start, keep, out)
    return r


def _fill(r: DemoResult, load: LoadResult, failover: Failover) -> None:
    r.load = load
    r.acknowledged = load.acknowledged
    r.unknown, r.unknown_calls = len(load.unknown), len(load.unknown_calls)
    r.retried = load.retried
    r.wall_s = load.wall_s
    r.throughput = load.acknowledged / load.wall_s if load.wall_s else 0.0
    w = latency_windows(load, failover)
    r.p50_ms, r.p99_ms = percentile_ms(load, 0.50, w.steady), percentile_ms(load, 0.99, w.steady)
    r.steady_entries = sum(a.entries for a in w.steady)
    r.failover_p99_ms = percentile_ms(load, 0.99, w.failover)
    r.failover_max_ms = max((a.latency_s * 1000 for a in w.failover), default=0.0)
    r.failover_entries = sum(a.entries for a in w.failover)
    r.first_ack_ms = None if w.first_ack_s is None else w.first_ack_s * 1000
    r.startup_entries = sum(a.entries for a in w.startup)
    r.killed, r.killed_t, r.restarted_t = failover.killed, failover.killed_t, failover.restarted_t
    leaderless = failover.leaderless_s(load.acks)
    r.leaderless_ms = None if leaderless is None else leaderless * 1000
    first = failover.new_leader_ack(load.acks)
    r.new_leader = first.node_id if first else None
    r.problems += [f"the leader refused an append: {why}" for why in load.refused]
    if r.killed is None:
        r.problems.append("the leader was never killed (too few entries acknowledged before the end)")
    elif r.leaderless_ms is None:
        r.problems.append("no entry was acknowledged after the leader was killed")
    if r.acknowledged + r.unknown != r.entries:
        r.problems.append(f"{r.entries - r.acknowledged - r.unknown:,} entries were never decided")


def _fill_verification(r: DemoResult, v: Verification) -> None:
    r.lost, r.duplicated = v.lost, v.duplicated
    r.unknown_in_log, r.unknown_absent = v.unknown_in_log, v.unknown_absent
    r.checked_to = v.checked_to
    r.verified = v.ok
    r.problems += v.problems


def _finish(r: DemoResult, load, v, t_start: float, keep: bool, out) -> None:
    r.ok = not r.problems and r.lost == 0 and r.verified
    if load is None:
        print("the demo failed before its checks:", file=out)
        for p in r.problems:
            print(f"  - {p}", file=out)
    print(f"{'result':<21}: {'every check passed' if r.ok else 'FAILED'} in {time.perf_counter() - t_start:.1f} s",
          file=out)
    if not keep and r.ok:
        shutil.rmtree(r.out_dir, ignore_errors=True)
        print(f"{'':<21}  (temporary folder removed; pass --dir to keep the stores, logs and chart)", file=out)
    elif not keep:
        print(f"{'':<21}  (the stores and node logs are kept in {r.out_dir} to look into)", file=out)


def _log_tail(path: str, lines: int = 3) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-lines:])
    except OSError:
        return ""


def _interrupted(signum, _frame) -> None:
    """SIGTERM stops the demo as Ctrl-C does: the node processes are killed on the way out."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(args) -> int:
    entries = getattr(args, "entries", 200_000)
    for name, low in (("entries", 10), ("batch", 1), ("in_flight", 1), ("body_size", 8)):
        value = getattr(args, name, None)
        if value is not None and value < low:
            print(f"dledger demo: error: --{name.replace('_', '-')} must be at least {low}, got {value}",
                  file=sys.stderr)
            return 2
    kwargs = {k: getattr(args, k) for k in ("batch", "in_flight", "body_size") if getattr(args, k, None) is not None}
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        result = run_demo(getattr(args, "dir", None), entries, audit=getattr(args, "audit", True), **kwargs)
    except DemoSetupError as exc:
        print(f"dledger demo: error: {exc}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    main.last_result = result                 # for callers that want the store directories
    return 0 if result.ok else 1


__all__ = ["DemoResult", "DemoSetupError", "main", "run_demo"]
