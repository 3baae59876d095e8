"""Committed entries/s and commit latency of a 3-process dledger cluster on loopback, side by
side with PySyncObj.

Three node processes (``python -m dledger.bench.node``: a ``DLedgerServer`` on TCP, stores in
a temporary directory removed after) per payload and durability mode. Appends come from inside
the leader's process, as an embedding broker issues them (``--via embedded``, the default), or
through ``AsyncDLedgerClient`` from this process (``--via client``). Two loads: a fixed 1,000
appends/s one at a time (latency), and saturation (``batch_append`` calls of 32 KiB worth of
bodies, at most 256, with 16 calls in flight). Latency is from the call to the SUCCESS answer
(commit on a quorum); a batch counts once.

``--vs-pysyncobj`` also runs PySyncObj (3 processes, a replicated append-only list with one
``@replicated`` method, its log in a journal file, ``callback=`` timing each commit; 1,000
calls in flight at saturation, since it has no batch call) with the same payloads and loads in
the same run, and prints the ratio. PySyncObj is for this benchmark only, never a dependency:

    .venv/bin/pip install pysyncobj

Examples:

    python benchmarks/bench_tcp_cluster.py --quick
    python benchmarks/bench_tcp_cluster.py --vs-pysyncobj --failover
    python benchmarks/bench_tcp_cluster.py --payload 128 --mode page_cache --vs-pysyncobj --json
    python benchmarks/bench_tcp_cluster.py --payload 16384 --via embedded,client --seconds 10
    python benchmarks/bench_tcp_cluster.py --payload 1048576 --load saturation   # 1 MiB entries, MB/s = x1.05

Progress goes to stderr; the table (or ``--json``: one object per configuration with
``payload``, ``mode``, ``committed_per_s``, ``p50_ms``, ``p99_ms`` and, with
``--vs-pysyncobj``, ``pysyncobj_committed_per_s``) to stdout. ``dledger bench`` is the same
code without PySyncObj.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from _common import command, machine  # noqa: E402

from dledger.bench.cli import add_arguments, plan_from, print_rows  # noqa: E402
from dledger.bench.runner import failover, ratios, run_dledger, run_peer  # noqa: E402


def pysyncobj_argv(node_id: str, peers: str, store_dir: str) -> list[str]:
    return [sys.executable, os.path.join(HERE, "_pysyncobj_node.py"), "--id", node_id, "--peers", peers,
            "--store-dir", store_dir]


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="examples:" + __doc__.split("Examples:")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.add_argument("--vs-pysyncobj", action="store_true", help="also run PySyncObj with the same payloads")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args()
    if args.vs_pysyncobj:
        try:
            import pysyncobj  # noqa: F401
        except ImportError:
            print("--vs-pysyncobj needs PySyncObj (benchmark only): .venv/bin/pip install pysyncobj", file=sys.stderr)
            return 2
    try:
        plan = plan_from(args)
    except ValueError as exc:
        print(f"bench_tcp_cluster: error: {exc}", file=sys.stderr)
        return 2
    say = None if args.quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    header = {"command": command(), "machine": machine(), "load_average_before": load_average(),
              "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    if not args.json:
        print(f"# {header['command']}\n# {header['machine']}\n# load average {header['load_average_before']}, "
              f"{header['utc']} UTC", flush=True)
    t0 = time.monotonic()
    rows = run_dledger(plan, say)
    if args.vs_pysyncobj and not args.peers:
        rows += run_peer("pysyncobj", pysyncobj_argv, plan, say)
        ratios(rows)
    fo = failover(plan.modes[0], say) if args.failover and not args.peers else None
    header["load_average_after"] = load_average()
    header["wall_s"] = round(time.monotonic() - t0, 1)
    if args.json:
        print(json.dumps({"run": header}))
        print_rows([r for r in rows if r.system == "dledger"] if args.vs_pysyncobj else rows, True)
        if fo:
            print(json.dumps({"failover": fo}))
    else:
        print_rows(rows, False)
        if fo:
            print(f"failover: SIGKILL of leader {fo['old_leader']} to the first commit by {fo['new_leader']}: "
                  f"{fo['kill_to_first_commit_ms']:.0f} ms (target <= 1000 ms)")
        print(f"# load average after {header['load_average_after']}, {header['wall_s']} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
