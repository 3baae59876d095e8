"""A put's encoding alone: ``PutEncoder.encode_batch`` (``dledger.broker.put_encode``), the work a
broker's ``put_messages`` does before its append, in this process, no store, no cluster.

    python benchmarks/bench_broker_encode.py [--messages N] [--batch B] [--payload P] [--repeat R]

Encodes ``--messages`` messages (default 200,000) in batches of ``--batch`` (default 64), each a
dict as a producer gives ``put_messages``: one of 4 topics and 4 queues, a ``--payload``-byte body
(default 128), a tag, one key and a UNIQ_KEY property (32 upper-case hex digits), the born host
the store's. Prints the CPU microseconds per message (this thread's CPU time, the run of least
time of ``--repeat``, default 3) with the compiled loop (``encode_puts``, where this install
has it) and with the Python reference alone, and whether the two gave the same bytes.

examples:
  python benchmarks/bench_broker_encode.py
  python benchmarks/bench_broker_encode.py --payload 1024 --batch 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from dledger.broker import speedups  # noqa: E402
from dledger.broker.put_encode import PutEncoder  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n  python benchmarks/bench_broker_encode.py\n"
                                        "  python benchmarks/bench_broker_encode.py --payload 1024 --batch 1",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--payload", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.messages < 1 or args.batch < 1 or args.payload < 0 or args.repeat < 1:
        ap.error("--messages, --batch and --repeat must be at least 1, --payload at least 0")
    body = bytes(range(256)) * (args.payload // 256) + bytes(args.payload % 256)
    msgs = [{"topic": f"BenchTopic{i % 4}", "queue_id": i % 4, "body": body, "tags": "TagA",
             "keys": [f"order-{i}"], "properties": {"UNIQ_KEY": f"{i:032X}"}} for i in range(args.messages)]
    batches = [msgs[i:i + args.batch] for i in range(0, len(msgs), args.batch)]
    enc = PutEncoder(("10.0.0.7", 10911))
    results = {}
    print(f"{args.messages} messages, {args.payload}-byte bodies, batches of {args.batch}; "
          f"compiled loop: {'yes' if speedups.compiled is not None else 'no (this install has none)'}")
    for name, compiled in (("compiled", True), ("python", False)):
        if compiled and speedups.compiled is None:
            continue
        best, out = None, None
        for _ in range(args.repeat):
            t = time.thread_time()
            out = [enc.encode_batch(b, 1_700_000_000_000, 1 << 22, compiled_loop=compiled) for b in batches]
            dt = time.thread_time() - t
            best = dt if best is None or dt < best else best
        results[name] = out
        print(f"  {name:9s} {best / args.messages * 1e6:6.2f} µs CPU per message  "
              f"({args.messages / best:,.0f} messages/s on one thread)")
    if len(results) == 2:
        print(f"  same bytes both ways: {results['compiled'] == results['python']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
