"""Put throughput and dispatch lag of the broker store (``dledger.broker``) on a 3-node group in
one process (real asyncio runtime, in-process transport, file stores in a temporary directory,
page_cache durability), every node wrapped in a ``DLedgerCommitLog``.

    python benchmarks/bench_broker.py [--messages N] [--producers K] [--window W] [--no-dispatch]

For each body size (128 B, 1 KiB) and each way of putting (``put_message_async`` from K
threads each keeping W puts in flight; ``put_messages_async`` of 64 messages from K threads
keeping W/64 batches in flight) it prints one row: PUT_OK messages/s (clock from the first
put to the last answer), the put latency (call to answer, p50/p99) and the dispatch lag
(store timestamp stamped by the append hook to the moment a replica's reput service wrote the
consume-queue unit; p50/p99 over every message on every replica). Messages go to 4 topics x 4
queues with a tag and a key each. ``--no-dispatch`` leaves the reput services idle, to
measure the put path (encode, append hook, replication) alone. Heartbeats every 500 ms (a 1.5 s election timeout, as
docs/operations.md advises for a machine whose processes can be starved of CPU): with the
100 ms default a leader starved by the put load itself steps down mid-run.
"""

from __future__ import annotations

import argparse
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
        lags: list[float] = []

        def on_dispatch(_offset, store_timestamp) -> None:
            lags.append(time.time() * 1000 - store_timestamp)

        for log in logs:
            log.reput.on_dispatch = on_dispatch
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
        while dispatch and len(lags) < 3 * total and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"rate": total / elapsed, "p50": pct(lat, 0.5) * 1000, "p99": pct(lat, 0.99) * 1000,
                "lag50": pct(lags, 0.5), "lag99": pct(lags, 0.99), "failures": failures[0],
                "dispatched": len(lags), "expected": 3 * total}
    finally:
        for log in logs:
            log.server.shutdown()
            log.close()
        shutil.rmtree(base, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python benchmarks/bench_broker.py --messages 50000")
    ap.add_argument("--messages", type=int, default=100_000, help="messages per row (default 100000)")
    ap.add_argument("--producers", type=int, default=4, help="producer threads (default 4)")
    ap.add_argument("--window", type=int, default=256, help="messages in flight per producer (default 256)")
    ap.add_argument("--no-dispatch", action="store_true",
                    help="leave the reput service idle (the put path alone; lag columns empty)")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}\ncommand: {command()}")
    rows = []
    for size in (128, 1024):
        for batched in (False, True):
            r = run(args.messages, size, args.producers, args.window, batched, not args.no_dispatch)
            rows.append([f"put_messages ({BATCH} per call)" if batched else "put_message", f"{size} B",
                         f"{r['rate']:,.0f}", f"{r['p50']:.1f}", f"{r['p99']:.1f}", f"{r['lag50']:.1f}",
                         f"{r['lag99']:.1f}", r["failures"], f"{r['dispatched']}/{r['expected']}"])
    print_table("PUT_OK messages/s, put latency (ms) and dispatch lag (ms), 3 replicas in one process",
                ["mode", "body", "messages/s", "put p50", "put p99", "lag p50", "lag p99", "not OK",
                 "dispatched"], rows)


if __name__ == "__main__":
    main()
