"""Benchmark: scanning a dledger log with Spark, and the replica audit.

Writes a log of at least ``--gb`` GiB with DLedgerMmapFileStore (bodies of 50-150 random bytes,
``--segment-mb`` MiB data segments), then measures on ``local[2]`` (or ``--master``):

- full scan (every column, bodies included) and header-only scans (``body=false``, with and
  without CRC verification), written to Spark's ``noop`` sink so every column is materialised;
- the same files decoded by a plain single-process Python loop (``struct`` + the CRC-32 the
  reader uses, per record, no Spark), in the same run; the ratio is Spark's entries/s over the loop's;
- the scan engine alone (``dledger.spark.scan``, one process, no Spark), to show where time goes;
- the audit of 3 replicas x ``--audit-entries`` entries (``run_audit`` on a running session;
  the session start is reported apart), and once of 3 replicas x ``--big-audit-entries``;
- ``dledger audit --master <master>`` run from the shell on 3 replicas x
  ``--cold-audit-entries`` entries, ``--cold-repeat`` times, each in a new process (JVM start
  included), with its own breakdown (the report's ``time:`` line). The first of them may write
  the JVM class archive of local sessions (``dledger.spark.jvm_archive``) when there is none.

Each scan is run ``--repeat`` times and the best is reported. Everything generated is deleted at
the end. Prints one table of figures, with the machine and the command.

    .venv/bin/python benchmarks/bench_spark_scan.py            # the recorded run
    .venv/bin/python benchmarks/bench_spark_scan.py --gb 0.1 --audit-entries 100000   # quick
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from dledger.entry import BODY_OFFSET
from dledger.entry import crc32 as entry_crc32
from dledger.store import DLedgerMmapFileStore

HEADER = struct.Struct(">iiqqqiIIi")


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    import pyspark
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {mem} RAM, "
            f"Python {platform.python_version()}, pyspark {pyspark.__version__}, "
            f"{java[0] if java else 'java ?'}")


def write_log(store_dir: str, target_bytes: int, segment_bytes: int, seed: int = 1,
              max_entries: int | None = None) -> int:
    """Append random 50-150 byte bodies until the data reaches ``target_bytes``; returns count."""
    rnd = random.Random(seed)
    pool = rnd.randbytes(1 << 20)
    st = DLedgerMmapFileStore.open(store_dir, data_file_size=segment_bytes)
    st.persist_term(1, None)
    written = entries = 0
    batch = 100_000
    while written < target_bytes and (max_entries is None or entries < max_entries):
        n = batch if max_entries is None else min(batch, max_entries - entries)
        offs = [rnd.randrange(0, (1 << 20) - 150) for _ in range(n)]
        lens = [rnd.randrange(50, 151) for _ in range(n)]
        bodies = [pool[o:o + ln] for o, ln in zip(offs, lens)]
        st.batch_append_as_leader(bodies)
        entries += n
        written += sum(lens) + BODY_OFFSET * n
    st.update_committed_index(st.ledger_end_index)
    st.close()
    return entries


def plain_python_decode(store_dir: str) -> tuple[int, int]:
    """The baseline: walk every segment record by record, check each CRC; (entries, crc sum)."""
    data_dir = os.path.join(store_dir, "data")
    n = total = 0
    unpack = HEADER.unpack_from
    crc32 = entry_crc32  # the same CRC function the reader uses
    for name in sorted(os.listdir(data_dir)):
        with open(os.path.join(data_dir, name), "rb") as f:
            buf = f.read()
        mv = memoryview(buf)
        off, end = 0, len(buf)
        while off + BODY_OFFSET <= end:
            magic, size, index, term, pos, _ch, _cc, body_crc, body_len = unpack(buf, off)
            if magic not in (1, 2, 3):
                break
            crc = crc32(mv[off + BODY_OFFSET:off + size])
            if body_crc and crc != body_crc:
                raise SystemExit(f"CRC mismatch at {index}")
            total += crc
            n += 1
            off += size
    return n, total


def cold_audit(root: str, entries: int, master: str, repeat: int, fig) -> None:
    """``dledger audit`` of 3 replicas as a user runs it: a new process, its own session."""
    t = time.perf_counter()
    a = os.path.join(root, "cold", "dledger-n0")
    write_log(a, 1 << 62, 64 * 2**20, seed=3, max_entries=entries)
    for name in ("dledger-n1", "dledger-n2"):
        shutil.copytree(a, os.path.join(root, "cold", name))
    paths = [os.path.join(root, "cold", f"dledger-n{i}") for i in range(3)]
    fig("cold audit replicas", f"3 x {entries:,} entries (written in "
                               f"{time.perf_counter() - t:.1f} s)")
    for k in range(repeat):
        load = os.getloadavg()[0]
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dledger.cli", "audit", *paths,
                               "--master", master, "--out", os.path.join(root, "cold", "out")],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        secs = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"dledger audit failed ({proc.returncode}): {proc.stderr[-2000:]}")
        laps = next((ln.strip() for ln in proc.stdout.splitlines()
                     if ln.strip().startswith("time:")), "")
        fig(f"`dledger audit` from the shell, 3 replicas, {master}, run {k + 1} (new process, "
            f"JVM start included)", f"{secs:.1f} s wall (load {load:.1f}); {laps}")
    shutil.rmtree(os.path.join(root, "cold"))


def big_audit(root: str, entries: int, spark, fig) -> None:
    """One audit of 3 replicas x ``entries`` on the running session."""
    from dledger.spark.audit import run_audit

    t = time.perf_counter()
    a = os.path.join(root, "big", "a")
    write_log(a, 1 << 62, 64 * 2**20, seed=4, max_entries=entries)
    for name in ("b", "c"):
        shutil.copytree(a, os.path.join(root, "big", name))
    paths = [os.path.join(root, "big", x) for x in "abc"]
    fig("big audit replicas", f"3 x {entries:,} entries, 64 MiB segments "
                              f"(written in {time.perf_counter() - t:.1f} s)")
    load = os.getloadavg()[0]
    t = time.perf_counter()
    report = run_audit(paths, spark=spark)
    secs = time.perf_counter() - t
    assert report.exit_code == 0 and report.common_prefix_end == entries - 1, \
        report.summary_lines()
    fig(f"audit, 3 x {entries:,} entries (session already running)",
        f"{secs:.1f} s, {3 * entries / secs / 1e6:.2f} M entries/s (load {load:.1f} at start)")
    shutil.rmtree(os.path.join(root, "big"))


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.05, help="size of the scanned log in GiB")
    ap.add_argument("--segment-mb", type=int, default=128, help="data segment size in MiB")
    ap.add_argument("--audit-entries", type=int, default=1_000_000)
    ap.add_argument("--cold-audit-entries", type=int, default=200_000,
                    help="entries per replica of the `dledger audit` run from the shell "
                         "(a new process: JVM start included); 0 skips it")
    ap.add_argument("--cold-repeat", type=int, default=2,
                    help="how many times `dledger audit` is run from the shell")
    ap.add_argument("--big-audit-entries", type=int, default=10_000_000,
                    help="entries per replica of one more audit (3 replicas); 0 skips it")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write the logs (deleted afterwards)")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import warnings
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")

    root = tempfile.mkdtemp(prefix="dledger-bench-spark-", dir=args.dir)
    figures: list[tuple[str, str]] = []

    def fig(name: str, value: str) -> None:
        figures.append((name, value))
        print(f"  {name}: {value}", flush=True)

    try:
        print(f"machine: {machine()}")
        print("load average at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
        print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
        log = os.path.join(root, "scan", "dledger-n0")
        t = time.perf_counter()
        n = write_log(log, int(args.gb * 2**30), args.segment_mb * 2**20)
        data_bytes = sum(os.path.getsize(os.path.join(log, "data", f))
                         for f in os.listdir(os.path.join(log, "data")))
        segs = len(os.listdir(os.path.join(log, "data")))
        fig("scan log", f"{n:,} entries, {data_bytes / 2**30:.2f} GiB in {segs} segments "
                        f"of {args.segment_mb} MiB (written in {time.perf_counter() - t:.1f} s)")

        from pyspark.sql import SparkSession
        from dledger.spark import register
        from dledger.spark import scan as scan_mod
        from dledger.spark.audit import run_audit

        t = time.perf_counter()
        spark = (SparkSession.builder.master(args.master).appName("bench-spark-scan")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", args.driver_memory)
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.sql.shuffle.partitions", "4")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        fig("session start", f"{time.perf_counter() - t:.1f} s")

        def spark_scan(body: bool, verify: bool) -> None:
            df = (spark.read.format("dledger").option("body", str(body).lower())
                  .option("verify", str(verify).lower()).load(log))
            df.write.format("noop").mode("overwrite").save()

        count = spark.read.format("dledger").option("body", "false").load(log).count()
        assert count == n, (count, n)
        rows = []
        for label, body, verify in (("full scan (body, CRC checked)", True, True),
                                    ("header-only scan (CRC checked)", False, True),
                                    ("header-only scan (no CRC)", False, False)):
            secs, _ = best(lambda: spark_scan(body, verify), args.repeat)
            rows.append((label, secs))
            fig(f"spark {args.master} {label}", f"{secs:.2f} s, {n / secs / 1e6:.2f} M entries/s")

        secs_plain, (n_plain, _) = best(lambda: plain_python_decode(log), 1)
        assert n_plain == n, (n_plain, n)
        fig("plain Python decode, 1 process (struct + crc32 per record)",
            f"{secs_plain:.2f} s, {n / secs_plain / 1e6:.2f} M entries/s")
        for label, secs in rows:
            fig(f"ratio spark/plain, {label}", f"{secs_plain / secs:.1f}x")

        info = scan_mod.store_info(log)
        tasks = scan_mod.plan_segments([info])

        def engine(body: bool, verify: bool) -> int:
            k = 0
            for task in tasks:
                for b in scan_mod.read_segment(task, body=body, verify=verify):
                    k += b.num_rows
            return k

        for label, body, verify in (("header-only, CRC checked", False, True),
                                    ("header-only, no CRC", False, False)):
            secs, k = best(lambda: engine(body, verify), 1)
            assert k == n
            fig(f"scan engine alone, 1 process, {label}",
                f"{secs:.2f} s, {n / secs / 1e6:.2f} M entries/s")

        shutil.rmtree(os.path.join(root, "scan"))

        # audit: 3 replicas x N entries (written once, copied: replicas are byte-identical)
        t = time.perf_counter()
        a = os.path.join(root, "audit", "a")
        write_log(a, 1 << 62, 64 * 2**20, seed=2, max_entries=args.audit_entries)
        for name in ("b", "c"):
            shutil.copytree(a, os.path.join(root, "audit", name))
        paths = [os.path.join(root, "audit", x) for x in "abc"]
        fig("audit replicas", f"3 x {args.audit_entries:,} entries, 64 MiB segments "
                              f"(written in {time.perf_counter() - t:.1f} s)")
        secs, report = best(lambda: run_audit(paths, spark=spark), args.repeat)
        assert report.exit_code == 0 and report.common_prefix_end == args.audit_entries - 1, \
            report.summary_lines()
        fig("audit, 3 replicas (session already running)",
            f"{secs:.2f} s, {3 * args.audit_entries / secs / 1e6:.2f} M entries/s, verdict "
            f"{report.verdict} (load {os.getloadavg()[0]:.1f})")
        shutil.rmtree(os.path.join(root, "audit"))

        if args.big_audit_entries:
            big_audit(root, args.big_audit_entries, spark, fig)
        spark.stop()

        if args.cold_audit_entries:
            cold_audit(root, args.cold_audit_entries, args.master, args.cold_repeat, fig)

        print("load average at end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
        print("\nfigures")
        for name, value in figures:
            print(f"| {name} | {value} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
