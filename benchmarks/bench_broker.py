"""Put throughput and dispatch lag of the broker store (``dledger.broker``) with 3 replicas.

    python benchmarks/bench_broker.py [--engine processes|inproc|both] [--seconds S] [--rate R]
                                      [--messages N] [--producers K] [--window W] [--no-dispatch]
                                      [--payload 128,1024] [--json]

``--engine processes`` (the default; the shape of production): three node processes on
loopback TCP (``python -m dledger.bench.node --broker``: a ``DLedgerServer`` wrapped in a
``DLedgerCommitLog``, page_cache durability, 1 s election timeout), the load inside the
leader's process as a broker's request threads put: ``put_messages_async`` of 64 messages
with 16 calls in flight for ``--seconds`` (saturation), then ``put_message_async`` at
``--rate`` messages/s (a steady load below saturation), and with ``--batched-rate R`` the
batches of 64 again at R messages/s (the dispatch lag at a share of saturation). Every node dispatches in its own
process. For each body size (128 B, 1 KiB) and load it prints PUT_OK messages/s, the put
latency (call to answer, p50/p99), the dispatch lag over every message on every replica (store
timestamp stamped by the append hook to the end of the dispatch batch that wrote the
consume-queue unit; p50/p99 as the upper bound of the histogram bucket) and the CPU time each
process spent per message (leader, followers). ``--json``: one JSON object per row instead of
the table (``payload``, ``load``, ``messages_per_s``, ``p50_ms``, ``p99_ms``, ``lag_p50_ms``,
``lag_p99_ms``, as ``bench_tcp_cluster.py`` names its figures, and ``cpu_us_per_message`` per
node, the leader's id prefixed ``L:``), after one object describing the run.

``--engine inproc``: the three nodes in this one process (asyncio runtime, in-process
transport), ``put_message_async`` from K threads each keeping W puts in flight and
``put_messages_async`` of 64 from K threads keeping W/64 batches in flight, ``--messages`` per
row; every replica's dispatch shares the one interpreter. ``--no-dispatch`` leaves the reput
services idle there, to measure the put path alone. Messages go to 4 topics x 4 queues with a
tag and a key each.

The broker per client protocol (the project's msgpack wire, RocketMQ remoting, gRPC v2, with
the real clients) is ``bench_broker_protocols.py``: a file of its own, as this one measures the
store without a client protocol in front of it. ``bench_broker.py --protocol own|remoting|grpc|all
[its options]`` runs that one (every argument is handed to it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import command, machine, print_table  # noqa: E402

from dledger import DLedgerConfig, DLedgerServer  # noqa: E402
from dledger.bench.broker_load import lag_percentile  # noqa: E402
from dledger.bench.cluster import NodeFailed, ProcessCluster, dledger_node_argv  # noqa: E402
from dledger.broker import DLedgerCommitLog, PutMessageStatus  # noqa: E402
from dledger.core import Role  # noqa: E402
from dledger.runtime.asyncio_runtime import AsyncioRuntime  # noqa: E402
from dledger.transport.inproc import Hub  # noqa: E402

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
BATCH = 64


def group(base: str, dispatch: bool = True):
    runtime, hub = AsyncioRuntime(), Hub()
    elected = threading.Event()
    logs = []
    for node_id in ("n0", "n1", "n2"):
        cfg = DLedgerConfig(group="bench", self_id=node_id, peers=PEERS, store_base_dir=base,
                            mapped_file_size_for_entry_data=256 << 20, mapped_file_size_for_entry_index=32 << 20,
                            max_pending_requests_num=100_000, heart_beat_time_interval_ms=500)
        s = DLedgerServer(cfg, runtime=runtime, hub=hub)
        s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and elected.set())
        logs.append(DLedgerCommitLog(s.startup(), dispatch_interval_ms=5 if dispatch else 10**9))
    assert elected.wait(10), "no leader"
    deadline = time.monotonic() + 10
    while not any(log.roles.writable for log in logs):
        assert time.monotonic() < deadline, "no master"
        time.sleep(0.01)
    return logs


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run(messages: int, size: int, producers: int, window: int, batched: bool, dispatch: bool = True) -> dict:
    base = tempfile.mkdtemp(prefix="dledger-bench-broker-")
    logs = group(base, dispatch)
    try:
        master = next(log for log in logs if log.roles.writable)
        body = bytes(size)
        lat: list[float] = []
        failures = [0]
        per = messages // producers

        def producer(p: int) -> None:
            inflight = []
            mine = []
            step = BATCH if batched else 1
            limit = max(1, window // step)
            for k in range(0, per, step):
                t0 = time.perf_counter()
                if batched:
                    f = master.put_messages_async(
                        [{"topic": f"T{(k + j) % 4}", "queue_id": (k + j) // 4 % 4, "body": body, "tags": "tag",
                          "keys": [f"k{p}-{k + j}"]} for j in range(BATCH)])
                else:
                    f = master.put_message_async(f"T{k % 4}", k // 4 % 4, body, tags="tag", keys=[f"k{p}-{k}"])
                inflight.append((t0, f))
                if len(inflight) >= limit:
                    t, old = inflight.pop(0)
                    res = old.result(60)
                    mine.append(time.perf_counter() - t)
                    failures[0] += sum(r.status is not PutMessageStatus.PUT_OK
                                       for r in (res if batched else [res]))
            for t, old in inflight:
                res = old.result(60)
                mine.append(time.perf_counter() - t)
                failures[0] += sum(r.status is not PutMessageStatus.PUT_OK for r in (res if batched else [res]))
            lat.extend(mine)

        threads = [threading.Thread(target=producer, args=(p,)) for p in range(producers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        step = BATCH if batched else 1
        total = producers * len(range(0, per, step)) * step      # what the producers really sent
        deadline = time.monotonic() + 30

        def dispatched() -> int:
            return sum(log.dispatch_lag.snapshot()[1] for log in logs)

        while dispatch and dispatched() < 3 * total and time.monotonic() < deadline:
            time.sleep(0.01)
        lag = merged([log.dispatch_lag.snapshot()[0] for log in logs])
        return {"rate": total / elapsed, "p50": pct(lat, 0.5) * 1000, "p99": pct(lat, 0.99) * 1000,
                "lag50": lag_percentile(lag, 0.5), "lag99": lag_percentile(lag, 0.99), "failures": failures[0],
                "dispatched": dispatched(), "expected": 3 * total}
    finally:
        for log in logs:
            log.server.shutdown()
            log.close()
        shutil.rmtree(base, ignore_errors=True)


def merged(snapshots) -> list[list]:
    """Cumulative histograms of the same bounds, added bucket by bucket."""
    out = [[le, 0] for le, _n in snapshots[0]]
    for snap in snapshots:
        for row, (_le, n) in zip(out, snap):
            row[1] += n
    return out


def _fmt(ms) -> str:
    return "-" if ms is None else f"≤{ms:g}"


def wait_dispatched(cluster: ProcessCluster, timeout_s: float = 60.0) -> dict[str, dict]:
    """Poll every node's stats until each has dispatched all it has committed (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = {i: cluster.ask(i, {"op": "stats"}) for i in cluster.alive()}
        if all(s["dispatched_index"] >= s["committed_index"] for s in stats.values()) or \
                time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def run_processes(payload: int, seconds: float, rate: float, batch: int = BATCH, window: int = 16,
                  batched_rate: float | None = None) -> list[dict]:
    """One 3-process group: a saturation run then a fixed-rate run (and, with ``batched_rate``,
    batches of ``batch`` at that many messages/s); one row (a dict) each."""
    rows = []
    with ProcessCluster(dledger_node_argv("page_cache", heart_beat_leak=10, extra=["--broker"])) as cluster:
        leader = cluster.wait_leader()
        runs = (("saturation", {"rate": None, "batch": batch, "window": window, "seconds": seconds}),
                ("rate", {"rate": rate, "batch": 1, "window": 1, "seconds": max(2.0, seconds / 2)}))
        if batched_rate:
            runs += (("batched_rate", {"rate": batched_rate, "batch": batch, "window": window, "seconds": seconds}),)
        for load, params in runs:
            for i in cluster.alive():
                cluster.ask(i, {"op": "stats", "reset": True})
            cpu0 = cluster.cpu_seconds()
            res = cluster.ask(leader, {"op": "load", "payload": payload, **params}, timeout_s=params["seconds"] + 90)
            if "error" in res:
                raise NodeFailed(f"{leader}: {res['error']}")
            stats = wait_dispatched(cluster)
            cpu1 = cluster.cpu_seconds()
            lag = merged([s["lag_ms"] for s in stats.values()])
            per_msg = {i: (cpu1[i] - cpu0[i]) / max(1, s["dispatched"]) * 1e6 for i, s in stats.items() if i in cpu1}
            rows.append({"payload": payload, "load": load, "rate": params["rate"],
                         "messages_per_s": round(res["committed_per_s"], 1), "p50_ms": res["p50_ms"],
                         "p99_ms": res["p99_ms"], "lag_p50_ms": lag_percentile(lag, 0.5),
                         "lag_p99_ms": lag_percentile(lag, 0.99),
                         "cpu_us_per_message": {("L:" if i == leader else "") + i: round(v, 1)
                                                for i, v in per_msg.items()},
                         "not_ok": res["failures"] + (0 if res.get("still_leader", True) else 1)})
    return rows


def process_table_row(r: dict) -> list:
    cpu = r["cpu_us_per_message"]
    leader = next((v for k, v in cpu.items() if k.startswith("L:")), 0)
    followers = [v for k, v in cpu.items() if not k.startswith("L:")]
    load = {"saturation": "saturation", "batched_rate": f"{r['rate']:,.0f}/s in {BATCH}s"}.get(r["load"],
                                                                                            f"{r['rate']:,.0f}/s")
    return [load, f"{r['payload']} B",
            f"{r['messages_per_s']:,.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}", _fmt(r["lag_p50_ms"]),
            _fmt(r["lag_p99_ms"]), f"{leader:.0f}", "/".join(f"{v:.0f}" for v in followers), r["not_ok"]]


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--protocol" or a.startswith("--protocol=") for a in argv):
        from bench_broker_protocols import main as protocols_main
        return protocols_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n  python benchmarks/bench_broker.py --seconds 10\n"
                                        "  python benchmarks/bench_broker.py --payload 128 --batched-rate 80000\n"
                                        "  python benchmarks/bench_broker.py --engine inproc --messages 50000\n"
                                        "  python benchmarks/bench_broker.py --protocol all    # bench_broker_protocols.py")
    ap.add_argument("--engine", choices=("processes", "inproc", "both"), default="processes",
                    help="three node processes on TCP (default), or three nodes in this process")
    ap.add_argument("--seconds", type=float, default=5.0, help="processes: seconds of saturation load (default 5)")
    ap.add_argument("--rate", type=float, default=2000.0,
                    help="processes: messages/s of the steady load (default 2000)")
    ap.add_argument("--batched-rate", type=float, default=None,
                    help=f"processes: also a row of put_messages of {BATCH} at this many messages/s (below "
                         f"saturation: the dispatch lag at a given share of it)")
    ap.add_argument("--messages", type=int, default=100_000, help="inproc: messages per row (default 100000)")
    ap.add_argument("--producers", type=int, default=4, help="inproc: producer threads (default 4)")
    ap.add_argument("--window", type=int, default=256, help="inproc: messages in flight per producer (default 256)")
    ap.add_argument("--no-dispatch", action="store_true",
                    help="inproc: leave the reput service idle (the put path alone; lag columns empty)")
    ap.add_argument("--payload", default="128,1024", help="body sizes in bytes, comma-separated (default 128,1024)")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object per row on stdout (keys as bench_tcp_cluster.py's: payload, load, "
                         "messages_per_s, p50_ms, p99_ms, lag_p99_ms, ...), after one with the run's machine")
    args = ap.parse_args(argv)
    if args.batched_rate is not None and not args.batched_rate > 0:
        ap.error(f"--batched-rate must be above 0, got {args.batched_rate:g}")
    sizes = [int(x) for x in args.payload.split(",") if x.strip()]
    if args.json:
        print(json.dumps({"run": {"machine": machine(), "command": command()}}), flush=True)
    else:
        print(f"machine: {machine()}\ncommand: {command()}")
    if args.engine in ("processes", "both"):
        rows = []
        for size in sizes:
            rows.extend(run_processes(size, args.seconds, args.rate, batched_rate=args.batched_rate))
        if args.json:
            for r in rows:
                print(json.dumps({"engine": "processes", **r}), flush=True)
        else:
            print_table("3 broker processes on loopback TCP: PUT_OK messages/s, put latency (ms), dispatch lag "
                        "(ms, every replica), CPU per message (us)",
                        ["load", "body", "messages/s", "put p50", "put p99", "lag p50", "lag p99", "CPU leader",
                         "CPU followers", "not OK"], [process_table_row(r) for r in rows])
    if args.engine in ("inproc", "both"):
        rows = []
        for size in sizes:
            for batched in (False, True):
                r = run(args.messages, size, args.producers, args.window, batched, not args.no_dispatch)
                if args.json:
                    print(json.dumps({"engine": "inproc", "payload": size,
                                      "load": "put_messages" if batched else "put_message",
                                      "messages_per_s": round(r["rate"], 1), "p50_ms": r["p50"], "p99_ms": r["p99"],
                                      "lag_p50_ms": r["lag50"], "lag_p99_ms": r["lag99"],
                                      "not_ok": r["failures"], "dispatched": r["dispatched"],
                                      "expected": r["expected"]}), flush=True)
                    continue
                rows.append([f"put_messages ({BATCH} per call)" if batched else "put_message", f"{size} B",
                             f"{r['rate']:,.0f}", f"{r['p50']:.1f}", f"{r['p99']:.1f}", _fmt(r["lag50"]),
                             _fmt(r["lag99"]), r["failures"], f"{r['dispatched']}/{r['expected']}"])
        if not args.json:
            print_table("3 replicas in one process: PUT_OK messages/s, put latency (ms) and dispatch lag (ms)",
                        ["mode", "body", "messages/s", "put p50", "put p99", "lag p50", "lag p99", "not OK",
                         "dispatched"], rows)


if __name__ == "__main__":
    main()
