"""Benchmark configurations over process clusters: one implementation for ``dledger bench``
and ``benchmarks/bench_tcp_cluster.py``.

For each durability mode a fresh 3-process cluster is started (stores in a temporary
directory, removed after); for each payload the leader runs the fixed-rate load and then the
saturation load (``via="embedded"``: inside the leader's process; ``via="client"``: through
``AsyncDLedgerClient`` in this process). ``failover()`` SIGKILLs the leader of an idle cluster
and times the first commit by the next one (with the default election timing,
300 ms without heartbeats). ``run_peer()`` runs the same loads on another
system's node processes (the script passes PySyncObj's).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dledger.bench.cluster import NodeFailed, ProcessCluster, dledger_node_argv
from dledger.bench.load import client_load
from dledger.bench.stats import Row

PAYLOADS = (16, 128, 1024, 16384)
MODES = ("page_cache", "fsync")


@dataclass
class Plan:
    payloads: Sequence[int] = PAYLOADS
    modes: Sequence[str] = MODES
    vias: Sequence[str] = ("embedded",)
    seconds: float = 5.0            # per saturation run
    rate_seconds: float = 3.0       # per fixed-rate run
    rate: float = 1000.0
    warmup_s: float = 0.5
    #: saturation: batch and window by payload (bodies per call, calls in flight)
    window: int = 16
    batch_bytes: int = 32 * 1024
    max_batch: int = 256
    loads: Sequence[str] = ("rate", "saturation")
    #: missed heartbeats before a follower stands for election during the throughput runs: a
    #: shared machine can starve a leader's process for more than the default 300 ms, and an
    #: election in the middle of a run measures the scheduler (the failover run uses 3)
    heart_beat_leak: int = 10
    peers: str | None = None        # a running cluster (client only)
    group: str = "bench"
    secret: bytes | None = None
    extra: dict = field(default_factory=dict)

    def batch_for(self, payload: int) -> int:
        return max(1, min(self.max_batch, self.batch_bytes // max(payload, 1)))


def _say(progress: Callable[[str], None] | None, text: str) -> None:
    if progress is not None:
        progress(text)


def _row(system: str, via: str, payload: int, mode: str, load: str, res: dict, **extra) -> Row:
    return Row(system=system, via=via, payload=payload, mode=mode, load=load,
               committed_per_s=res.get("committed_per_s", 0.0), p50_ms=res.get("p50_ms", 0.0),
               p99_ms=res.get("p99_ms", 0.0), committed=res.get("committed", 0), failures=res.get("failures", 0),
               extra={k: v for k, v in extra.items() if v is not None})


def _load_cmd(plan: Plan, payload: int, load: str, window: int | None = None) -> dict:
    if load == "rate":
        return {"op": "load", "payload": payload, "seconds": plan.rate_seconds, "rate": plan.rate,
                "warmup_s": plan.warmup_s}
    return {"op": "load", "payload": payload, "seconds": plan.seconds, "rate": None,
            "batch": plan.batch_for(payload), "window": window or plan.window, "warmup_s": plan.warmup_s}


def _cpu_per_entry(cluster: ProcessCluster, before: dict, wall_s: float, committed: int, leader: str | None
                   ) -> dict:
    """CPU of each node process over a run: microseconds per committed entry and share of one
    core ("L" marks the leader)."""
    after = cluster.cpu_seconds()
    out = {}
    for i in after:
        if i in before and committed:
            used = after[i] - before[i]
            out[i + ("L" if i == leader else "")] = {"us_per_entry": round(used / committed * 1e6, 2),
                                                     "core_share": round(used / wall_s, 2) if wall_s else None}
    return out


def _embedded(cluster: ProcessCluster, cmd: dict, progress) -> tuple[dict, str]:
    """Run ``cmd`` in the leader's process (a new leader is found if it moved); the answer
    carries the node processes' CPU per committed entry (whole run, warm-up included)."""
    for _attempt in range(3):
        leader = cluster.wait_leader()
        before, t0 = cluster.cpu_seconds(), time.monotonic()
        res = cluster.ask(leader, cmd, cmd["seconds"] + cmd["warmup_s"] + 60,
                          lambda m: _say(progress, f"    {m['committed']:,} committed"))
        if "error" not in res:
            wall = time.monotonic() - t0
            total = res.get("committed", 0) * (cmd["seconds"] + cmd["warmup_s"]) / max(res.get("seconds") or 1e-9, 1e-9)
            res["cpu"] = _cpu_per_entry(cluster, before, wall, int(total), leader)
            return res, leader
    raise NodeFailed(f"the leader kept moving: {res['error']}")


def _via_client(peers: str, group: str, secret, cmd: dict, progress) -> dict:
    from dledger.client import AsyncDLedgerClient

    async def go() -> dict:
        client = AsyncDLedgerClient(peers, group, secret, timeout_s=10.0)
        try:
            await client.metadata()
            res = await client_load(client, cmd["payload"], cmd["seconds"], rate=cmd["rate"],
                                    batch=cmd.get("batch", 1), window=cmd.get("window", 1),
                                    warmup_s=cmd["warmup_s"],
                                    on_progress=lambda n: _say(progress, f"    {n:,} committed"))
        finally:
            await client.close()
        return res.summary()

    return _run_async(go())


def _run_async(coro):
    try:
        import uvloop  # type: ignore
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def run_dledger(plan: Plan, progress: Callable[[str], None] | None = None) -> list[Row]:
    """Every (mode, payload, via, load) of ``plan`` on fresh dledger clusters (or, with
    ``plan.peers``, through the client against a running one)."""
    rows: list[Row] = []
    if plan.peers:
        for payload in plan.payloads:
            for load in plan.loads:
                cmd = _load_cmd(plan, payload, load)
                _say(progress, f"dledger client {payload} B {load} against {plan.peers}")
                res = _via_client(plan.peers, plan.group, plan.secret, cmd, progress)
                rows.append(_row("dledger", "client", payload, "as-configured", load, res,
                                 failure_codes=res.get("failure_codes") or None))
        return rows
    for mode in plan.modes:
        for payload in plan.payloads:
            # a fresh cluster per payload: the stores stay small and one run cannot slow the next
            _say(progress, f"dledger {mode} {payload} B: starting 3 node processes")
            with ProcessCluster(dledger_node_argv(mode, plan.heart_beat_leak)) as cluster:
                cluster.wait_leader()
                for via in plan.vias:
                    for load in plan.loads:
                        cmd = _load_cmd(plan, payload, load)
                        _say(progress, f"  {via} {load} ({'%g/s' % plan.rate if load == 'rate' else 'batch %d x window %d' % (cmd['batch'], cmd['window'])})")
                        if via == "embedded":
                            res, leader = _embedded(cluster, cmd, progress)
                        else:
                            before, t0 = cluster.cpu_seconds(), time.monotonic()
                            res = _via_client(cluster.peers, "bench", None, cmd, progress)
                            wall = time.monotonic() - t0
                            total = res.get("committed", 0) * wall / max(res.get("seconds") or 1e-9, 1e-9)
                            res["cpu"] = _cpu_per_entry(cluster, before, wall, int(total), None)
                        rows.append(_row("dledger", via, payload, mode, load, res,
                                         failure_codes=res.get("failure_codes") or None, cpu=res.get("cpu")))
                        _say(progress, f"  -> {res['committed_per_s']:,.0f} committed/s, p50 {res['p50_ms']:.2f} ms, "
                                       f"p99 {res['p99_ms']:.2f} ms")
    return rows


def run_peer(system: str, argv_for, plan: Plan, progress=None, window: int = 1000) -> list[Row]:
    """The same payloads and loads on another system's node processes (in ``page_cache``
    terms: the peer's own durability, stated by the caller)."""
    rows: list[Row] = []
    for payload in plan.payloads:
        _say(progress, f"{system} {payload} B: starting 3 node processes")
        with ProcessCluster(argv_for) as cluster:
            cluster.wait_leader(30)
            for load in plan.loads:
                cmd = _load_cmd(plan, payload, load, window)
                _say(progress, f"  {load}")
                res, _leader = _embedded(cluster, cmd, progress)
                rows.append(_row(system, "embedded", payload, "page_cache", load, res, cpu=res.get("cpu")))
                _say(progress, f"  -> {res['committed_per_s']:,.0f} committed/s, p50 {res['p50_ms']:.2f} ms, "
                               f"p99 {res['p99_ms']:.2f} ms")
    return rows


def failover(mode: str = "page_cache", progress=None, timeout_s: float = 10.0) -> dict:
    """SIGKILL the leader of a fresh idle cluster; the time from the signal to the first
    append committed by the next leader (its own report of the commit), and who led."""
    with ProcessCluster(dledger_node_argv(mode)) as cluster:
        old = cluster.wait_leader()
        res, _ = _embedded(cluster, {"op": "load", "payload": 128, "seconds": 0.5, "rate": 200.0,
                                     "warmup_s": 0.0}, None)
        _say(progress, f"failover: killing leader {old} (SIGKILL)")
        t0 = time.time()
        cluster.kill(old)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node_id in cluster.alive():
                ans = cluster.ask(node_id, {"op": "commit_one"}, timeout_s)
                if ans.get("committed_at"):
                    ms = (ans["committed_at"] - t0) * 1000
                    _say(progress, f"failover: {node_id} committed its first entry {ms:.0f} ms after the kill")
                    return {"old_leader": old, "new_leader": node_id, "kill_to_first_commit_ms": round(ms, 1)}
            time.sleep(0.005)
    raise NodeFailed(f"no node committed within {timeout_s:g} s of the leader's kill")


def ratios(rows: list[Row]) -> None:
    """Set ``pysyncobj_committed_per_s`` (and the ratio, p50/p99) on dledger rows from the
    PySyncObj row of the same payload and load."""
    peer = {(r.payload, r.load): r for r in rows if r.system == "pysyncobj"}
    for r in rows:
        p = peer.get((r.payload, r.load))
        if r.system == "dledger" and p is not None:
            r.extra["pysyncobj_committed_per_s"] = p.committed_per_s
            r.extra["pysyncobj_p50_ms"] = p.p50_ms
            r.extra["pysyncobj_p99_ms"] = p.p99_ms
            r.extra["ratio"] = round(r.committed_per_s / p.committed_per_s, 1) if p.committed_per_s else None


__all__ = ["MODES", "PAYLOADS", "Plan", "failover", "ratios", "run_dledger", "run_peer"]
