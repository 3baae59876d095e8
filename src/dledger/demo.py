"""The main job (``dledger demo``, ``make run``): a 3-node in-process cluster under load,
with a leader failure in the middle.

What it does, on the real asyncio runtime and the in-process transport, with file stores:
1. starts n0, n1, n2 and waits for a leader;
2. several appender threads append ``entries`` unique entries through whoever leads,
   each keeping a window of appends in flight, with a progress bar;
3. at 40 % it stops the leader (a clean shutdown of that node); appenders keep going: calls
   that fail (the node went away, NOT_LEADER, EXPIRED_TERM, timeouts) are retried through
   the new leader; the time without a leader is measured;
4. at 70 % it starts the stopped node again from its store directory;
5. when every entry is acknowledged it waits until all three replicas have committed the
   last one, stops them, reopens each store read-only and checks that every acknowledged
   entry is at its acknowledged index with its bytes on every replica, and that the
   replicas' logs are byte-identical up to the committed index;
6. prints entries, throughput, commit latency p50/p99, time without a leader, and the
   three store directories (kept when ``--dir`` is given, for ``dledger audit``).

``main(args)`` returns 0 when every check passed, else 1. ``run_demo(...)`` returns a
``DemoResult`` with the figures and ``store_dirs``.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from dledger.config import DLedgerConfig
from dledger.core import Role
from dledger.progress import Progress
from dledger.protocol import DLedgerResponseCode as Code
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.server import DLedgerServer
from dledger.store import DLedgerMmapFileStore
from dledger.transport.inproc import Hub

IDS = ("n0", "n1", "n2")
PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
DATA_FILE_SIZE = 64 * 1024 * 1024
INDEX_FILE_SIZE = 32 * 1024 * 1024


@dataclass
class DemoResult:
    ok: bool
    entries: int
    retries: int
    wall_s: float
    throughput: float
    p50_ms: float
    p99_ms: float
    leaderless_ms: float
    store_dirs: list[str]
    problems: list[str] = field(default_factory=list)


class _Cluster:
    """Three servers, the current leader, and the time spent without one."""

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir
        self.runtime = AsyncioRuntime()
        self.hub = Hub()
        self.servers: dict[str, DLedgerServer] = {}
        self.cond = threading.Condition()
        self.leader: DLedgerServer | None = None
        self.leader_term = -1
        self.lost_at: float | None = None
        self.leaderless_s = 0.0

    def config(self, node_id: str) -> DLedgerConfig:
        return DLedgerConfig(group="demo", self_id=node_id, peers=PEERS, store_base_dir=self.base_dir,
                             mapped_file_size_for_entry_data=DATA_FILE_SIZE,
                             mapped_file_size_for_entry_index=INDEX_FILE_SIZE)

    def start(self, node_id: str) -> DLedgerServer:
        s = DLedgerServer(self.config(node_id), runtime=self.runtime, hub=self.hub)
        s.add_role_change_handler(lambda ch, s=s: self._on_change(s, ch))
        self.servers[node_id] = s
        s.startup()
        return s

    def _on_change(self, server: DLedgerServer, change) -> None:
        with self.cond:
            if change.role is Role.LEADER and change.term >= self.leader_term:
                self.leader, self.leader_term = server, change.term
                if self.lost_at is not None:
                    self.leaderless_s += time.perf_counter() - self.lost_at
                    self.lost_at = None
                self.cond.notify_all()
            elif self.leader is server and change.role is not Role.LEADER:
                self.leader = None
                if self.lost_at is None:
                    self.lost_at = time.perf_counter()

    def stop(self, node_id: str) -> None:
        s = self.servers[node_id]
        with self.cond:
            if self.leader is s:
                self.leader = None
                self.lost_at = time.perf_counter()
        s.shutdown()

    def current_leader(self, timeout: float = 5.0) -> DLedgerServer | None:
        with self.cond:
            self.cond.wait_for(lambda: self.leader is not None and self.leader.started, timeout)
            return self.leader

    def wait_committed(self, index: int, timeout: float = 30.0) -> bool:
        """Block until every running server has committed ``index`` (woken by the drivers)."""
        done = threading.Event()
        servers = [s for s in self.servers.values() if s.started]

        def check(_ready=None) -> None:
            if all(s.node.committed_index >= index for s in servers):
                done.set()

        for s in servers:
            self.runtime.run_sync(lambda s=s: s.driver.ready_listeners.append(check))
        self.runtime.run_sync(check)
        return done.wait(timeout)

    def close(self) -> None:
        for s in self.servers.values():
            s.shutdown()
        self.runtime.close()


def _body(appender: int, seq: int, size: int) -> bytes:
    head = struct.pack(">II", appender, seq)
    return head + bytes(max(size - len(head), 0))


def run_demo(base_dir: str | None = None, entries: int = 200_000, *, body_size: int = 128, appenders: int = 4,
             window: int = 512, progress: bool = True, out=sys.stdout) -> DemoResult:
    keep = base_dir is not None
    base_dir = os.path.abspath(base_dir) if keep else tempfile.mkdtemp(prefix="dledger-demo-")
    os.makedirs(base_dir, exist_ok=True)
    cl = _Cluster(base_dir)
    for node_id in IDS:
        cl.start(node_id)
    t_start = time.perf_counter()
    if cl.current_leader(10) is None:
        cl.close()
        raise RuntimeError("no leader elected within 10 s")
    acked: dict[bytes, tuple[int, int]] = {}       # body -> (index, pos)
    info_bodies: set[bytes] = set()               # attempts whose outcome is unknown
    latencies: list[float] = []
    lock = threading.Lock()
    retries = [0]
    per_appender = [entries // appenders + (1 if k < entries % appenders else 0) for k in range(appenders)]

    def appender(k: int) -> None:
        todo = deque(_body(k, seq, body_size) for seq in range(per_appender[k]))
        inflight: deque = deque()
        while todo or inflight:
            while todo and len(inflight) < window:
                leader = cl.current_leader()
                if leader is None:
                    break
                body = todo.popleft()
                try:
                    inflight.append((body, leader.append(body), time.perf_counter()))
                except RuntimeError:                  # that node just stopped
                    todo.appendleft(body)
                    break
            if not inflight:
                continue
            body, fut, t0 = inflight.popleft()
            try:
                resp = fut.result(timeout=30)
            except Exception:                          # the node stopped under the call
                resp = None
            if resp is not None and resp.code == Code.SUCCESS:
                with lock:
                    acked[body] = (resp.index, resp.pos)
                    latencies.append(time.perf_counter() - t0)
            else:
                if resp is None or resp.code not in (Code.NOT_LEADER, Code.LEADER_PENDING_FULL,
                                                     Code.LEADER_TRANSFERRING):
                    with lock:
                        info_bodies.add(body)        # may or may not be in the log
                with lock:
                    retries[0] += 1
                todo.append(body)

    threads = [threading.Thread(target=appender, args=(k,), name=f"appender-{k}", daemon=True)
               for k in range(appenders)]
    stopped_node = None
    restarted = False
    t_appends = time.perf_counter()
    with Progress(entries, "appending", unit="entries", force=None if progress else False) as bar:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.05)
            n = len(acked)
            bar.update(n)
            if stopped_node is None and n >= 0.4 * entries:
                leader = cl.current_leader()
                if leader is not None:
                    stopped_node = leader.config.self_id
                    cl.stop(stopped_node)
            elif stopped_node is not None and not restarted and n >= 0.7 * entries:
                cl.start(stopped_node)
                restarted = True
        bar.update(len(acked))
    wall = time.perf_counter() - t_appends
    if stopped_node is not None and not restarted:
        cl.start(stopped_node)
    problems: list[str] = []
    last = max((i for i, _p in acked.values()), default=-1)
    if not cl.wait_committed(last):
        problems.append(f"not every replica committed index {last} within 30 s")
    leaderless_ms = cl.leaderless_s * 1000
    cl.close()
    store_dirs = [cl.config(i).default_path for i in IDS]
    problems += _verify(store_dirs, acked, info_bodies, last)
    lat = sorted(latencies)
    p50 = lat[len(lat) // 2] * 1000 if lat else 0.0
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else 0.0
    result = DemoResult(not problems and len(acked) == entries, len(acked), retries[0], wall,
                        len(acked) / wall if wall else 0.0, p50, p99, leaderless_ms, store_dirs, problems)
    _report(result, stopped_node, time.perf_counter() - t_start, out)
    if not keep:
        shutil.rmtree(base_dir, ignore_errors=True)
        print("                       (temporary: removed; pass --dir to keep them for `dledger audit`)", file=out)
    return result


def _verify(store_dirs: list[str], acked: dict[bytes, tuple[int, int]], info_bodies: set[bytes],
            last: int) -> list[str]:
    """Every acknowledged entry at its index on every replica; replicas byte-identical."""
    problems: list[str] = []
    stores = [DLedgerMmapFileStore.open(d, data_file_size=DATA_FILE_SIZE, index_file_size=INDEX_FILE_SIZE,
                                        read_only=True) for d in store_dirs]
    try:
        for d, st in zip(store_dirs, stores):
            if st.ledger_end_index < last:
                problems.append(f"{d}: ends at {st.ledger_end_index}, below the last acknowledged index {last}")
        if problems:
            return problems
        ref = stores[0]
        for i in range(ref.ledger_before_begin_index + 1, last + 1):
            raw = ref.get_raw(i)
            for d, st in zip(store_dirs[1:], stores[1:]):
                if st.get_raw(i) != raw:
                    problems.append(f"{d}: entry {i} differs from {store_dirs[0]}")
                    break
            if len(problems) > 10:
                break
        seen: dict[bytes, int] = {}
        for e in ref.iter_entries(ref.ledger_before_begin_index + 1, last):
            if e.magic == 1:
                seen[e.body] = seen.get(e.body, 0) + 1
        for body, (index, pos) in acked.items():
            e = ref.get(index)
            if e.body != body or e.pos != pos:
                problems.append(f"acknowledged entry {index} (pos {pos}) holds other bytes")
                if len(problems) > 10:
                    break
        for body, n in seen.items():
            if n > 1 and body not in info_bodies:
                problems.append(f"an entry appended once appears {n} times")
                break
    finally:
        for st in stores:
            st.close()
    return problems


def _report(r: DemoResult, stopped: str | None, total_s: float, out) -> None:
    print(f"entries acknowledged : {r.entries:,} ({r.retries:,} attempts retried through the failover)", file=out)
    print(f"throughput           : {r.throughput:,.0f} committed entries/s over {r.wall_s:.2f} s", file=out)
    print(f"commit latency       : p50 {r.p50_ms:.2f} ms, p99 {r.p99_ms:.2f} ms", file=out)
    print(f"time without a leader: {r.leaderless_ms:.0f} ms (leader {stopped} stopped at 40 %, "
          f"restarted at 70 %)", file=out)
    print(f"replicas verified    : {'OK' if not r.problems else 'FAILED'} ({len(r.store_dirs)} stores)", file=out)
    for p in r.problems:
        print(f"  - {p}", file=out)
    print("store directories    : " + " ".join(r.store_dirs), file=out)
    print(f"total                : {total_s:.2f} s", file=out)


def main(args) -> int:
    entries = getattr(args, "entries", 200_000)
    if entries <= 0:
        print("--entries must be positive", file=sys.stderr)
        return 2
    result = run_demo(getattr(args, "dir", None), entries)
    main.last_result = result                 # for callers that want the store directories
    return 0 if result.ok else 1
