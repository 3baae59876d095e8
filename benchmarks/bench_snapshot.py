"""State-machine snapshots: save and install throughput, and a far-behind follower's catch-up.

How long a follower far behind the leader's log start takes to serve again, by a snapshot,
against the same bytes caught up by pushes.

Three parts, each on a temporary directory (removed after) on the default temporary disk:

1. **save**: ``HashChainStateMachine`` (``dledger.sim.hash_chain``) with ``--size`` bytes of
   padding writes its state through ``FileSnapshotStore.begin_save`` and its streamed
   ``SnapshotWriter`` (CRC computed as it goes), then ``commit()`` (data fsynced, meta written,
   directory renamed). MB/s of the whole, and the split between writing and commit.
2. **install** (the store's part): the same bytes received as an install would receive them:
   read from the saved snapshot in 1 MiB chunks, each chunk's CRC computed (the leader's part)
   and checked by ``InstallTarget.write_chunk`` (appended and fsynced per chunk), then
   ``verify()`` + ``finish(verified=True)``, then ``on_snapshot_load`` reading it back.
3. **end to end** (``--engine``, ``--e2e-size``, ``--entries``): three nodes, each a
   ``DLedgerServer`` with a ``HashChainStateMachine`` (``_snapshot_node.py``), either three
   processes over TCP on loopback (``processes``, the default) or three servers in this process
   on one asyncio runtime and the in-process transport (``inproc``: one event-loop thread runs
   all three, and nothing goes through msgpack or a socket). Real disk and wall clock in both.
   A follower is stopped; the leader appends ``--entries`` entries of ``--body`` bytes, takes a
   snapshot (its state machine's padding makes it ``--e2e-size`` bytes) and trims its log past
   the follower; the follower starts again on its store and the clock runs until it has
   applied the leader's last entry (the snapshot installed and loaded, the states equal):
   *serving again*. Then the same bytes as log entries: the follower is stopped, the leader
   appends ``--e2e-size`` bytes in ``--push-body`` entries (no snapshot, no trimming), and the
   clock runs from the follower's start until it has applied them all: a catch-up by pushes,
   once with the default ``peer_push_quota`` (20 MiB/s per lagging follower) and once with it
   out of the way.

Examples:

    python benchmarks/bench_snapshot.py                      # 1 GiB save/install, 256 MiB end to end
    python benchmarks/bench_snapshot.py --size 256M --skip-e2e
    python benchmarks/bench_snapshot.py --skip-store --e2e-size 64M --entries 100000 --engine processes,inproc --json
    python benchmarks/bench_snapshot.py --skip-store --skip-push --e2e-size 1G --entries 10000000 --heartbeat-ms 1000

Progress goes to stderr; the tables (or ``--json``: one object) to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from _common import command, machine, print_table  # noqa: E402

from _snapshot_node import SnapshotNode, handle  # noqa: E402

from dledger import DLedgerConfig  # noqa: E402
from dledger.bench.cluster import ProcessCluster  # noqa: E402
from dledger.entry import crc32  # noqa: E402
from dledger.runtime.asyncio_runtime import AsyncioRuntime  # noqa: E402
from dledger.sim.hash_chain import HashChainStateMachine  # noqa: E402
from dledger.snapshot import FileSnapshotStore  # noqa: E402
from dledger.transport.inproc import Hub  # noqa: E402

MiB = 1 << 20
CHUNK = MiB
QUIET = [False]


def say(text: str) -> None:
    if not QUIET[0]:
        print(text, file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    """``1G``, ``256M``, ``64K`` or a byte count (binary units)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds > 0 else float("inf")


# -- 1 and 2: the store ------------------------------------------------------------------------
def bench_save(base: str, size: int) -> tuple[dict, FileSnapshotStore, object]:
    files = FileSnapshotStore(os.path.join(base, "leader"))
    sm = HashChainStateMachine("leader", padding=size)
    os.sync()
    say(f"save: writing {human(size)} through begin_save/writer/commit ...")
    t0 = time.perf_counter()
    pending = files.begin_save(0, 1)
    sm.on_snapshot_save(pending.writer)
    t1 = time.perf_counter()
    meta = pending.commit()
    t2 = time.perf_counter()
    assert meta.data_size == size + 56, meta
    return dict(bytes=meta.data_size, write_s=t1 - t0, commit_s=t2 - t1, total_s=t2 - t0,
                mb_per_s=mbps(meta.data_size, t2 - t0)), files, meta


def bench_install(base: str, source: FileSnapshotStore, meta) -> dict:
    files = FileSnapshotStore(os.path.join(base, "follower"))
    os.sync()
    say(f"install: receiving {human(meta.data_size)} in {human(CHUNK)} chunks (fsync per chunk) ...")
    t0 = time.perf_counter()
    target = files.begin_install(meta)
    buf = bytearray(CHUNK)
    offset = chunks = 0
    with source.open_reader(meta) as reader:
        while True:
            k = reader.readinto(buf)
            if not k:
                break
            data = bytes(buf[:k])          # the request's bytes, as the leader sends them
            target.write_chunk(offset, data, crc32(data))
            offset += k
            chunks += 1
            if chunks % 256 == 0:
                say(f"  {human(offset)} received, {time.perf_counter() - t0:.1f} s")
    t1 = time.perf_counter()
    target.verify()
    installed = target.finish(verified=True)
    t2 = time.perf_counter()
    sm = HashChainStateMachine("follower")
    with files.open_reader(installed) as reader:
        sm.on_snapshot_load(reader)
    t3 = time.perf_counter()
    assert sm.snapshots_loaded == [-1] and installed.data_crc == meta.data_crc
    return dict(bytes=meta.data_size, chunks=chunks, chunks_s=t1 - t0, verify_finish_s=t2 - t1, load_s=t3 - t2,
                total_s=t3 - t0, mb_per_s=mbps(meta.data_size, t3 - t0),
                ms_per_chunk=(t1 - t0) / max(chunks, 1) * 1000)


def bench_fsync_floor(base: str, chunks: int) -> float:
    """ms per 1 MiB append + fsync of a plain file: the floor of an install's chunk loop."""
    path = os.path.join(base, "fsync-floor")
    data = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(chunks):
            os.write(fd, data)
            os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return elapsed / chunks * 1000


# -- 3: end to end, three nodes ---------------------------------------------------------------
E2E_CONFIG = dict(mapped_file_size_for_entry_data=64 * MiB, mapped_file_size_for_entry_index=4 * MiB,
                  max_pending_requests_num=1_000_000, max_wait_ack_time_ms=60_000, max_snapshot_reserve_num=1,
                  snapshot_follower_window_ms=0, heart_beat_time_interval_ms=200)
IDS = ("n0", "n1", "n2")


class InProcEngine:
    """Three ``SnapshotNode``s in this process: one asyncio runtime, an in-process hub."""

    name = "in-process"

    def __init__(self, base: str, config: dict) -> None:
        self.runtime, self.hub = AsyncioRuntime(), Hub()
        peers = ";".join(f"{i}-127.0.0.1:{20990 + k}" for k, i in enumerate(IDS))
        self.nodes = {i: SnapshotNode(i, peers, base, config, self.runtime, self.hub) for i in IDS}
        for node in self.nodes.values():
            node.start()

    def ask(self, node_id: str, cmd: dict, timeout_s: float = 900) -> dict:
        return handle(self.nodes[node_id], cmd, lambda text: say("  " + text))

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()
        self.runtime.close()


class ProcessEngine:
    """Three ``_snapshot_node.py`` processes on loopback TCP (``dledger.bench.cluster``)."""

    name = "processes, TCP"

    def __init__(self, base: str, config: dict) -> None:
        script = os.path.join(HERE, "_snapshot_node.py")

        def argv(node_id: str, peers: str, store_dir: str) -> list[str]:
            return [sys.executable, script, "--id", node_id, "--peers", peers, "--store-dir", store_dir,
                    "--config", json.dumps(config)]

        os.makedirs(base, exist_ok=True)
        self.cluster = ProcessCluster(argv, IDS, base_dir=base)

    def ask(self, node_id: str, cmd: dict, timeout_s: float = 900) -> dict:
        res = self.cluster.ask(node_id, cmd, timeout_s, on_progress=lambda m: say("  " + m["text"]))
        if "error" in res:
            raise RuntimeError(f"{node_id} {cmd['op']}: {res['error']}")
        return res

    def close(self) -> None:
        self.cluster.close()


def leader_of(engine, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i in IDS:
            if engine.ask(i, {"op": "state"}).get("role") == "LEADER":
                return i
        time.sleep(0.05)
    raise RuntimeError("no leader")


def e2e_install(engine_cls, base: str, entries: int, body_size: int, padding: int, timeout_s: float) -> dict:
    # segments small enough that the log spans several, so the trim after the snapshot drops some
    segment = min(64 * MiB, max(64 << 10, entries * (body_size + 48) // 8))
    engine = engine_cls(base, {**E2E_CONFIG, "mapped_file_size_for_entry_data": segment})
    try:
        leader = leader_of(engine)
        follower = next(i for i in IDS if i != leader)
        engine.ask(leader, {"op": "append", "count": 100, "body": body_size})
        engine.ask(follower, {"op": "stop"})
        say(f"e2e install: {follower} down; the leader appends {entries:,} entries of {body_size} B ...")
        append_s = engine.ask(leader, {"op": "append", "count": entries, "body": body_size})["seconds"]
        say(f"e2e install: the leader takes a {human(padding + 56)} snapshot and trims its log ...")
        snap = engine.ask(leader, {"op": "snapshot", "padding": padding})
        if snap["begin"] < 100:
            raise RuntimeError(f"the leader's log was not trimmed past the follower (begins after {snap['begin']})")
        end = snap["end"]
        say(f"e2e install: {follower} starts again {snap['begin'] - 100:,} entries behind the leader's log start; "
            f"waiting until it applied {end:,} ...")
        res = engine.ask(follower, {"op": "start", "until": end, "timeout": timeout_s}, timeout_s + 30)
        assert res["snapshots_loaded"] == [snap["index"]], res
        assert (engine.ask(follower, {"op": "digest", "index": end})
                == engine.ask(leader, {"op": "digest", "index": end})), "the follower's state differs"
        return dict(engine=engine.name, entries=entries, body=body_size, behind_begin=snap["begin"] - 100,
                    snapshot_bytes=snap["bytes"], heartbeat_ms=E2E_CONFIG["heart_beat_time_interval_ms"],
                    append_s=append_s, snapshot_s=snap["seconds"], serving_s=res["seconds"],
                    mb_per_s=mbps(snap["bytes"], res["seconds"]))
    finally:
        engine.close()


def e2e_push(engine_cls, base: str, nbytes: int, body_size: int, quota: int | None, timeout_s: float) -> dict:
    config = dict(E2E_CONFIG)
    if quota is not None:
        config["peer_push_quota"] = quota
    engine = engine_cls(base, config)
    try:
        leader = leader_of(engine)
        follower = next(i for i in IDS if i != leader)
        engine.ask(leader, {"op": "append", "count": 100, "body": body_size})
        end = engine.ask(leader, {"op": "state"})["end"]
        engine.ask(follower, {"op": "stop"})
        engine.ask(follower, {"op": "start", "until": end, "timeout": 60})       # caught up before
        engine.ask(follower, {"op": "stop"})
        count = max(1, nbytes // body_size)
        say(f"e2e push: {follower} down; the leader appends {count:,} entries of {body_size} B ...")
        engine.ask(leader, {"op": "append", "count": count, "body": body_size})
        end = engine.ask(leader, {"op": "state"})["end"]
        say(f"e2e push: {follower} starts again {count:,} entries behind; waiting until it applied {end:,} ...")
        res = engine.ask(follower, {"op": "start", "until": end, "timeout": timeout_s}, timeout_s + 30)
        assert res["snapshots_loaded"] == [], res
        assert (engine.ask(follower, {"op": "digest", "index": end})
                == engine.ask(leader, {"op": "digest", "index": end})), "the follower's state differs"
        return dict(engine=engine.name, entries=count, body=body_size, bytes=count * body_size,
                    serving_s=res["seconds"], mb_per_s=mbps(count * body_size, res["seconds"]),
                    peer_push_quota=quota if quota is not None else DLedgerConfig().peer_push_quota)
    finally:
        engine.close()


# -- main -------------------------------------------------------------------------------------
def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="examples:" + __doc__.split("Examples:")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=1 << 30, help="state size for save and install (default 1G)")
    p.add_argument("--e2e-size", type=parse_size, default=256 * MiB,
                   help="snapshot size (and bytes pushed) of the end-to-end runs (default 256M)")
    p.add_argument("--entries", type=int, default=1_000_000,
                   help="entries the follower misses in the end-to-end install (default 1,000,000)")
    p.add_argument("--body", type=int, default=100, help="body bytes of those entries (default 100)")
    p.add_argument("--push-body", type=parse_size, default=4096,
                   help="body bytes of the entries of the push catch-up (default 4096)")
    p.add_argument("--heartbeat-ms", type=int, default=200,
                   help="heart_beat_time_interval_ms of the end-to-end nodes (default 200): raise it on a machine "
                        "so loaded that the leader loses its leadership while appending")
    p.add_argument("--engine", default="processes",
                   help="where the end-to-end nodes run, comma-separated: processes (3 processes over TCP on "
                        "loopback, the default), inproc (3 servers in this process)")
    p.add_argument("--skip-store", action="store_true", help="skip the save and install parts (1 and 2)")
    p.add_argument("--skip-e2e", action="store_true", help="skip the end-to-end part (3)")
    p.add_argument("--skip-push", action="store_true", help="skip the push catch-ups of part 3")
    p.add_argument("--timeout", type=float, default=900, help="seconds a follower may take to catch up")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args()
    if args.entries < 1000:
        p.error(f"--entries must be at least 1000 (the follower misses them), got {args.entries}")
    if min(args.size, args.e2e_size) < MiB or args.push_body < 1:
        p.error("--size and --e2e-size must be at least 1M, --push-body at least 1")
    engines = {"processes": ProcessEngine, "inproc": InProcEngine}
    try:
        chosen = [engines[e.strip()] for e in args.engine.split(",")]
    except KeyError as exc:
        p.error(f"--engine: unknown engine {exc}")
    QUIET[0] = args.quiet
    E2E_CONFIG["heart_beat_time_interval_ms"] = args.heartbeat_ms
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.WARNING, stream=sys.stderr,
                        format="  log %(name)s: %(message)s")
    out: dict = {"command": command(), "machine": machine(), "load_average_before": load_average()}
    if not args.json:
        print(f"command: {out['command']}\nmachine: {out['machine']}\n"
              f"load average before: {out['load_average_before']}")
    work = tempfile.mkdtemp(prefix="dledger-bench-snap-", dir=args.dir)
    try:
        if not args.skip_store:
            save, source, meta = bench_save(work, args.size)
            out["save"] = save
            out["install"] = bench_install(work, source, meta)
            out["install"]["fsync_floor_ms_per_chunk"] = bench_fsync_floor(work, 64)
            shutil.rmtree(os.path.join(work, "leader"))
            shutil.rmtree(os.path.join(work, "follower"))
        if not args.skip_e2e:
            padding = max(0, args.e2e_size - 56)
            out["e2e_install"], out["e2e_push"] = [], []
            for engine in chosen:
                d = os.path.join(work, "e2e")
                out["e2e_install"].append(e2e_install(engine, d, args.entries, args.body, padding, args.timeout))
                shutil.rmtree(d, ignore_errors=True)
                for quota in () if args.skip_push else (None, 1 << 40):
                    out["e2e_push"].append(e2e_push(engine, d, args.e2e_size, args.push_body, quota, args.timeout))
                    shutil.rmtree(d, ignore_errors=True)
        out["load_average_after"] = load_average()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
        return 0
    if "save" in out:
        s, i = out["save"], out["install"]
        print_table("save: begin_save -> writer (CRC as it goes) -> commit (fsync, rename)",
                    ["bytes", "write s", "commit s", "total s", "MB/s"],
                    [[human(s["bytes"]), f"{s['write_s']:.2f}", f"{s['commit_s']:.2f}",
                      f"{s['total_s']:.2f}", f"{s['mb_per_s']:,.0f}"]])
        print_table("install (store): write_chunk 1 MiB with CRC (fsync each) -> verify + finish -> on_snapshot_load",
                    ["chunks", "chunks s", "ms/chunk", "fsync floor ms/chunk", "verify+finish s", "load s",
                     "total s", "MB/s"],
                    [[i["chunks"], f"{i['chunks_s']:.2f}", f"{i['ms_per_chunk']:.2f}",
                      f"{i['fsync_floor_ms_per_chunk']:.2f}", f"{i['verify_finish_s']:.2f}", f"{i['load_s']:.2f}",
                      f"{i['total_s']:.2f}", f"{i['mb_per_s']:,.0f}"]])
    if out.get("e2e_install"):
        print_table(f"end to end (heartbeat {E2E_CONFIG['heart_beat_time_interval_ms']} ms): a follower far behind, "
                    "from its restart until it applied the leader's last entry",
                    ["nodes", "entries missed", "behind log start", "snapshot", "append s", "snapshot s",
                     "to serving s", "MB/s"],
                    [[e["engine"], f"{e['entries']:,} x {e['body']} B", f"{e['behind_begin']:,}",
                      human(e["snapshot_bytes"]), f"{e['append_s']:.1f}", f"{e['snapshot_s']:.2f}",
                      f"{e['serving_s']:.2f}", f"{e['mb_per_s']:,.0f}"] for e in out["e2e_install"]])
    if out.get("e2e_push"):
        print_table("end to end: the same bytes caught up by pushes (follower restarted behind, log kept)",
                    ["nodes", "entries", "bytes", "peer_push_quota", "to serving s", "MB/s"],
                    [[r["engine"], f"{r['entries']:,} x {r['body']} B", human(r["bytes"]),
                      "default (20 MiB/s)" if r["peer_push_quota"] < 1 << 40 else "off (1 TiB/s)",
                      f"{r['serving_s']:.2f}", f"{r['mb_per_s']:,.0f}"] for r in out["e2e_push"]])
    print(f"\nload average after: {out['load_average_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
