"""Single-node append throughput of DLedgerMmapFileStore, against a raw floor loop.

For 128 B, 1 KB, 4 KB and 64 KB bodies: entries/s and MB/s of ``append_as_leader`` one entry
at a time and of ``batch_append_as_leader``, in the ``page_cache`` and ``fsync`` durability
modes. In the same run, a *raw floor* loop does only what any append must do (header pack,
CRC, copy into a mapped file, index unit pack) with nothing else, so the store is reported as
a ratio of that floor. Finally the reopen time of a store holding many small entries.

    python benchmarks/bench_store_append.py            # full run (about 2 minutes)
    python benchmarks/bench_store_append.py --quick    # a smaller run
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import command, machine, print_table  # noqa: E402

from dledger.entry import DLedgerEntry, crc32  # noqa: E402
from dledger.store import DLedgerMmapFileStore  # noqa: E402

SEGMENT = 1024 * 1024 * 1024
REC = struct.Struct(">iiqqqiIIi")
IDX = struct.Struct(">iqiqq")


def raw_floor(body: bytes, count: int, workdir: str) -> float:
    """Seconds for ``count`` appends doing only pack + CRC + copy + index pack into mmaps."""
    size = 48 + len(body)
    data_len = min(SEGMENT, size * count + 4096)
    path = os.path.join(workdir, "floor-data")
    ipath = os.path.join(workdir, "floor-index")
    with open(path, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, data_len)
    with open(ipath, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, 32 * count + 32)
    fd, ifd = os.open(path, os.O_RDWR), os.open(ipath, os.O_RDWR)
    mm = mmap.mmap(fd, data_len)
    im = mmap.mmap(ifd, 32 * count + 32)
    # Pages are faulted in 16 MiB at a time, as the store does: both pay the same kernel work.
    window = 16 * 1024 * 1024

    def populate(m, start):
        try:
            m.madvise(23, start, min(window, len(m) - start))  # MADV_POPULATE_WRITE
        except (OSError, ValueError):
            pass
        return start + window

    pack, ipack, crc = REC.pack_into, IDX.pack_into, crc32
    n = len(body)
    t0 = time.perf_counter()
    wp = 0
    xw = 0
    ready = xready = 0
    for i in range(count):
        if wp + size > data_len:
            wp = 0
        if wp + size > ready:
            ready = populate(mm, ready)
        if xw + 32 > xready:
            xready = populate(im, xready)
        pack(mm, wp, 1, size, i, 1, wp, 0, 0, crc(body), n)
        mm[wp + 48:wp + size] = body
        ipack(im, xw, 1, wp, size, i, 1)
        wp += size
        xw += 32
    elapsed = time.perf_counter() - t0
    mm.close(); im.close(); os.close(fd); os.close(ifd)
    os.unlink(path); os.unlink(ipath)
    return elapsed


def run_store(body: bytes, count: int, batch: int, durability: str, workdir: str) -> float:
    d = tempfile.mkdtemp(dir=workdir)
    store = DLedgerMmapFileStore.open(d, durability=durability)
    try:
        t0 = time.perf_counter()
        if batch <= 1:
            for _ in range(count):
                store.append_as_leader(DLedgerEntry(body=body))
        else:
            bodies = [body] * batch
            for _ in range(count // batch):
                store.batch_append_as_leader(bodies)
        elapsed = time.perf_counter() - t0
        assert store.ledger_end_index == (count // max(batch, 1)) * max(batch, 1) - 1
        return elapsed
    finally:
        store.close()
        shutil.rmtree(d)


def reopen_time(n_entries: int, workdir: str) -> tuple[float, float]:
    d = tempfile.mkdtemp(dir=workdir)
    store = DLedgerMmapFileStore.open(d)
    bodies = [b"x" * 16] * 10_000
    t0 = time.perf_counter()
    for _ in range(n_entries // len(bodies)):
        store.batch_append_as_leader(bodies)
    store.close()
    build = time.perf_counter() - t0
    os.system("sync")
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        again = DLedgerMmapFileStore.open(d)
        elapsed = time.perf_counter() - t0
        assert again.ledger_end_index == n_entries - 1
        again.close()
        best = min(best, elapsed)
    shutil.rmtree(d)
    return best, build


def best_of(repeat: int, fn) -> float:
    """Fastest of ``repeat`` runs; writeback of the previous run is finished before each one."""
    best = float("inf")
    for _ in range(repeat):
        os.sync()
        best = min(best, fn())
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best is shown)")
    ap.add_argument("--reopen-entries", type=int, default=None)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary dir)")
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0
    workdir = tempfile.mkdtemp(prefix="dledger-bench-", dir=args.dir)
    print(f"command: {command()}\nmachine: {machine()}")
    sizes = [(128, 1_000_000, 1000), (1024, 300_000, 500), (4096, 100_000, 100), (65536, 15_000, 16)]
    rows = []
    try:
        for size, count, batch in sizes:
            count = max(batch * 10, int(count * scale))
            body = os.urandom(size)
            floor = best_of(args.repeat, lambda: raw_floor(body, count, workdir))
            floor_rate = count / floor
            rows.append([f"{size} B", "raw floor", "-", f"{floor_rate:,.0f}",
                         f"{floor_rate * size / 1e6:,.0f}", "100%"])
            for durability in ("page_cache", "fsync"):
                for mode, b in (("one at a time", 1), (f"batch {batch}", batch)):
                    n = count
                    if durability == "fsync" and b == 1:
                        n = max(200, min(count, int(2000 * max(scale, 0.1))))
                    reps = 1 if (durability == "fsync" and b == 1) else args.repeat
                    t = best_of(reps, lambda: run_store(body, n, b, durability, workdir))
                    rate = (n // b * b) / t
                    rows.append([f"{size} B", mode, durability, f"{rate:,.0f}",
                                 f"{rate * size / 1e6:,.0f}", f"{100 * rate / floor_rate:.0f}%"])
        print_table("append_as_leader throughput (body bytes only in MB/s)",
                    ["body", "mode", "durability", "entries/s", "MB/s", "of floor"], rows)
        n = args.reopen_entries or (1_000_000 if args.quick else 10_000_000)
        best, build = reopen_time(n, workdir)
        print_table("reopen (recovery) of a store of small entries",
                    ["entries", "build s", "reopen ms (best of 3)"],
                    [[f"{n:,}", f"{build:.1f}", f"{best * 1000:.1f}"]])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
