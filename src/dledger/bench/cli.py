"""``dledger bench``: committed entries/s and commit latency of a 3-process cluster it starts
on loopback (or, with ``--peers``, of a running cluster through the client).

Examples::

    dledger bench --payload 128 --mode page_cache --seconds 5
    dledger bench --payload 16,128,1024,16384 --mode page_cache,fsync --via embedded,client --json
    dledger bench --failover
    dledger bench --peers "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913" --group g --payload 128

``benchmarks/bench_tcp_cluster.py`` runs the same code (``dledger.bench.runner``) and adds the
side-by-side run of PySyncObj.
"""

from __future__ import annotations

import argparse
import json
import sys

from dledger.bench.runner import MODES, PAYLOADS, Plan

EPILOG = """example:
  dledger bench --payload 128 --mode page_cache --seconds 5
more examples:
  dledger bench --payload 16,128,1024,16384 --mode page_cache,fsync --via embedded,client --json
  dledger bench --failover
  dledger bench --peers 'n0-127.0.0.1:20911;n1-127.0.0.1:20912' --group g --payload 128 --secret-file key
"""


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of byte counts") from None
    if not out or any(x <= 0 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every payload must be a positive byte count")
    return out


def _choice_list(choices):
    def parse(text: str) -> list[str]:
        out = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in out if x not in choices]
        if not out or bad:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return out
    return parse


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--payload", type=_int_list, default=list(PAYLOADS),
                   help="body sizes in bytes, comma-separated (default 16,128,1024,16384)")
    p.add_argument("--mode", type=_choice_list(MODES), default=list(MODES),
                   help="durability modes, comma-separated: page_cache, fsync (default both)")
    p.add_argument("--via", type=_choice_list(("embedded", "client")), default=["embedded"],
                   help="where appends come from: embedded (inside the leader's process), client "
                        "(AsyncDLedgerClient in this process); comma-separated (default embedded)")
    p.add_argument("--load", type=_choice_list(("rate", "saturation")), default=["rate", "saturation"],
                   help="rate (--rate appends/s, one at a time) and/or saturation (default both)")
    p.add_argument("--seconds", type=_positive(float), default=5.0, help="seconds per saturation run (default 5)")
    p.add_argument("--rate-seconds", type=_positive(float), default=3.0,
                   help="seconds per fixed-rate run (default 3)")
    p.add_argument("--rate", type=_positive(float), default=1000.0, help="appends/s of the rate load (default 1000)")
    p.add_argument("--window", type=_positive(int), default=16, help="calls in flight at saturation (default 16)")
    p.add_argument("--batch-bytes", type=_positive(int), default=32 * 1024,
                   help="bodies per saturation call: this many bytes' worth, at most --max-batch (default 32768)")
    p.add_argument("--max-batch", type=_positive(int), default=256, help="at most this many bodies per call (256)")
    p.add_argument("--quick", action="store_true", help="short runs (2 s saturation, 1 s rate)")
    p.add_argument("--failover", action="store_true",
                   help="also: SIGKILL the leader and time the first commit by the next one")
    p.add_argument("--peers", default=None,
                   help="benchmark a running cluster through the client instead of starting one")
    p.add_argument("--group", default="bench", help="the group of --peers (default bench)")
    p.add_argument("--secret-file", default=None, help="the shared secret of --peers (default DLEDGER_SECRET)")
    p.add_argument("--json", action="store_true", help="one JSON object per configuration on stdout")


def plan_from(args: argparse.Namespace) -> Plan:
    plan = Plan(payloads=args.payload, modes=args.mode, vias=args.via, loads=args.load, seconds=args.seconds,
                rate_seconds=args.rate_seconds, rate=args.rate, window=args.window, batch_bytes=args.batch_bytes,
                max_batch=args.max_batch, peers=args.peers, group=args.group)
    if args.quick:
        plan.seconds, plan.rate_seconds, plan.warmup_s = min(plan.seconds, 2.0), min(plan.rate_seconds, 1.0), 0.3
    if args.peers:
        from dledger.config import parse_peers
        from dledger.transport.auth import load_secret

        parse_peers(args.peers)                   # a bad --peers is one clear error
        keys = load_secret(args.secret_file)
        plan.secret = list(keys) if keys else None
    return plan


def progress_printer(enabled: bool):
    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
    return say if enabled else None


def print_rows(rows, as_json: bool) -> None:
    if as_json:
        for r in rows:
            print(json.dumps(r.to_json()), flush=True)
        return
    header = f"{'system':<10}{'via':<10}{'mode':<12}{'payload':>8}  {'load':<11}{'committed/s':>13}{'p50 ms':>9}{'p99 ms':>9}"
    has_peer = any("pysyncobj_committed_per_s" in r.extra for r in rows)
    if has_peer:
        header += f"{'PySyncObj/s':>13}{'ratio':>8}"
    print(header)
    for r in rows:
        line = (f"{r.system:<10}{r.via:<10}{r.mode:<12}{r.payload:>8}  {r.load:<11}{r.committed_per_s:>13,.0f}"
                f"{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}")
        if has_peer:
            if "pysyncobj_committed_per_s" in r.extra:
                ratio = r.extra.get("ratio")
                line += f"{r.extra['pysyncobj_committed_per_s']:>13,.0f}{(f'{ratio:.1f}x' if ratio else '-'):>8}"
            else:
                line += " " * 21
        cpu = r.extra.get("cpu")
        if cpu and r.load == "saturation":
            # CPU per committed entry of each node process, the leader first (whole run)
            parts = sorted(cpu.items(), key=lambda kv: not kv[0].endswith("L"))
            line += "  cpu us/entry " + " ".join(f"{k}:{v['us_per_entry']:.1f}" for k, v in parts)
        print(line, flush=True)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark a 3-process cluster on loopback (or a running one)",
                       description=__doc__.splitlines()[0], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dledger.bench.runner import failover, run_dledger

    plan = plan_from(args)
    say = progress_printer(True)
    rows = run_dledger(plan, say)
    print_rows(rows, args.json)
    if args.failover and not args.peers:
        fo = failover(plan.modes[0], say)
        print(json.dumps({"failover": fo}) if args.json else
              f"failover: SIGKILL of leader {fo['old_leader']} to the first commit by {fo['new_leader']}: "
              f"{fo['kill_to_first_commit_ms']:.0f} ms")
    return 0


__all__ = ["add_arguments", "add_parser", "plan_from", "print_rows", "run"]
