"""Committed entries/s and commit latency of a 3-node in-process cluster (real asyncio
runtime, in-process transport, file stores in a temporary directory, page_cache durability).

    python benchmarks/bench_inproc_cluster.py [--entries N] [--appenders K] [--window W] [--mixed] [--metrics]
                                                [--heartbeat-ms MS]

For each body size (128 B, 1 KiB) and each way of appending (single appends from K host
threads each keeping W in flight; batch_append of 64 bodies from K threads) it prints one
row: committed entries/s, MB/s and the latency from the call to the SUCCESS answer (p50,
p99). The leader is elected first; the clock starts with the first append and stops with
the last SUCCESS. ``--mixed`` draws each body's size from half to one and a half times the
nominal size (seeded), so no batch is of one record size: the stores' column-wise fast
paths for same-size batches are then mostly out of play. ``--metrics`` serves the three nodes'
metrics (``dledger.metrics``) on a local port, to measure what measuring costs.
``--heartbeat-ms`` sets ``heart_beat_time_interval_ms`` (default 100, an election timeout of
300 ms): raise it on a machine so loaded that the leader loses its leadership mid-run.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from dledger import DLedgerConfig, DLedgerServer  # noqa: E402
from dledger.core import Role  # noqa: E402
from dledger.runtime.asyncio_runtime import AsyncioRuntime  # noqa: E402
from dledger.transport.inproc import Hub  # noqa: E402

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


HEARTBEAT_MS = [100]


def cluster(base: str, store_type: str, metrics: bool = False):
    runtime, hub = AsyncioRuntime(), Hub()
    endpoint = None
    if metrics:
        from dledger.metrics import serve
        endpoint = serve(0, host="127.0.0.1")
    elected = threading.Event()
    servers = []
    for node_id in ("n0", "n1", "n2"):
        cfg = DLedgerConfig(group="bench", self_id=node_id, peers=PEERS, store_base_dir=base, store_type=store_type,
                            mapped_file_size_for_entry_data=256 << 20, mapped_file_size_for_entry_index=32 << 20,
                            max_pending_requests_num=100_000, heart_beat_time_interval_ms=HEARTBEAT_MS[0])
        s = DLedgerServer(cfg, runtime=runtime, hub=hub)
        if endpoint is not None:
            endpoint.add(s)
        s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and elected.set())
        servers.append(s.startup())
    assert elected.wait(10), "no leader"
    leader = next(s for s in servers if s.is_leader)
    return runtime, servers, leader, endpoint


def run(entries: int, size: int, appenders: int, window: int, batch: int, store_type: str,
        mixed: bool = False, metrics: bool = False) -> dict:
    base = tempfile.mkdtemp(prefix="dledger-bench-")
    try:
        return _run(base, entries, size, appenders, window, batch, store_type, mixed, metrics)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # three nodes' segments: about 0.9 GB


def _run(base: str, entries: int, size: int, appenders: int, window: int, batch: int, store_type: str,
         mixed: bool, metrics: bool) -> dict:
    runtime, servers, leader, endpoint = cluster(base, store_type, metrics)
    body = bytes(size)
    rng = random.Random(7)
    pool = [bytes(rng.randint(size // 2, size * 3 // 2)) for _ in range(509)] if mixed else [body]
    batches = [[pool[(i * batch + j) % len(pool)] for j in range(batch)] for i in range(61)]
    lat: list[float] = []
    failures = [0]
    per = entries // appenders // batch

    def appender() -> None:
        inflight = []
        mine = []
        for k in range(per):
            t0 = time.perf_counter()
            if batch == 1:
                f = leader.append(pool[k % len(pool)])
            else:
                f = leader.batch_append(batches[k % len(batches)])
            inflight.append((t0, f))
            if len(inflight) >= window:
                for t0, f in inflight:
                    r = f.result(60)
                    if r.code != 200:
                        failures[0] += 1
                    mine.append(time.perf_counter() - t0)
                inflight = []
        for t0, f in inflight:
            r = f.result(60)
            if r.code != 200:
                failures[0] += 1
            mine.append(time.perf_counter() - t0)
        lat.extend(mine)

    threads = [threading.Thread(target=appender) for _ in range(appenders)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = per * appenders * batch
    nbytes = done * (sum(map(len, pool)) / len(pool))
    assert leader.store.ledger_end_index + 1 >= done, "fewer entries in the log than counted"
    for s in servers:
        s.shutdown()
    runtime.close()
    if endpoint is not None:
        endpoint.scrape()           # what a scrape costs is the scraper's; this checks it works
        endpoint.close()
    lat.sort()
    return dict(entries=done, failures=failures[0], rate=done / wall, mbps=nbytes / wall / 1e6,
                p50=lat[len(lat) // 2] * 1000, p99=lat[int(len(lat) * 0.99)] * 1000)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=200_000)
    p.add_argument("--appenders", type=int, default=4)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--store", choices=("file", "memory"), default="file")
    p.add_argument("--mixed", action="store_true", help="body sizes vary from 0.5x to 1.5x")
    p.add_argument("--metrics", action="store_true", help="serve the nodes' metrics while appending")
    p.add_argument("--heartbeat-ms", type=int, default=100, help="heart_beat_time_interval_ms of the nodes")
    a = p.parse_args()
    HEARTBEAT_MS[0] = a.heartbeat_ms
    print(f"# {' '.join(sys.argv)}")
    print(f"# {platform.python_version()} {platform.system()} {platform.machine()}, {os.cpu_count()} cpus, "
          f"store={a.store}, appenders={a.appenders}, window={a.window}, sizes={'mixed' if a.mixed else 'fixed'}, "
          f"metrics={'on' if a.metrics else 'off'}, heartbeat={a.heartbeat_ms} ms")
    print(f"{'mode':<14}{'body':>6}{'entries':>10}{'entries/s':>12}{'MB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'fail':>6}")
    for size in (128, 1024):
        for mode, batch in (("append", 1), ("batch_append", 64)):
            r = run(a.entries, size, a.appenders, a.window if batch == 1 else max(a.window // batch, 2), batch,
                    a.store, a.mixed, a.metrics)
            print(f"{mode:<14}{size:>6}{r['entries']:>10}{r['rate']:>12,.0f}{r['mbps']:>8.1f}{r['p50']:>9.2f}"
                  f"{r['p99']:>9.2f}{r['failures']:>6}")


if __name__ == "__main__":
    main()
