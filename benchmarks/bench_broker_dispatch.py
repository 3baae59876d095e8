"""Dispatch alone: the broker's reput service (``dledger.broker.reput``) over a store of messages,
one store, no cluster.

    python benchmarks/bench_broker_dispatch.py [--messages N] [--size B] [--repeat R] [--profile]

Writes ``--messages`` messages (``--size``-byte bodies, default 200,000 x 128 B) into a
``DLedgerMmapFileStore`` in a temporary directory, the way the broker's master writes them:
each body a message in the CommitLog layout (``message_codec.encode_message``), stamped by an
append hook with its queue offset, physical offset and store timestamp; 4 topics x 4 queues
round robin, each message with a tag, one key and a UNIQ_KEY (32 upper-case hex digits, as
RocketMQ's producers make them); 64 MiB data segments, so the walk crosses segment ends.
Then it times ``ReputService.dispatch_up_to`` from index 0 to the end into a fresh
directory (consume queues, key index, checkpoint; the service's own batches), and prints
microseconds per message and messages per second, in two cases:

- *as written*: the store object that wrote the entries (a replica dispatching what it just
  appended or received);
- *reopened*: the store closed and opened again (a replica catching up after a restart: reads
  then check every record's CRC).

Each case runs ``--repeat`` times (the run of least CPU time kept). ``--profile`` runs the first case once more
(case *as written*) under cProfile and prints the 25 most expensive functions (cumulative and own time).
Everything generated is deleted at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import command, machine, print_table  # noqa: E402

from dledger.broker.message_codec import PHYSICAL_OFFSET_POSITION, encode_message  # noqa: E402
from dledger.broker.reput import ReputService  # noqa: E402
from dledger.store import DLedgerMmapFileStore  # noqa: E402

TOPICS, QUEUES = 4, 4
SEGMENT = 64 << 20
BATCH = 1000
_I64 = struct.Struct(">q")


def build(store_dir: str, messages: int, size: int) -> DLedgerMmapFileStore:
    """A store of ``messages`` messages (see the module docstring)."""
    store = DLedgerMmapFileStore.open(store_dir, data_file_size=SEGMENT, index_file_size=16 << 20)
    store.persist_term(1, None)

    def stamp(entry, view, body_offset: int) -> None:
        _I64.pack_into(view, body_offset + PHYSICAL_OFFSET_POSITION, entry.pos + body_offset)

    store.add_append_hook(stamp)
    body = bytes(range(256)) * (size // 256 + 1)
    body = body[:size]
    base_ts = 1_764_000_000_000
    for start in range(0, messages, BATCH):
        raws = []
        for k in range(start, min(messages, start + BATCH)):
            raws.append(encode_message(
                topic=f"TopicTest{k % TOPICS}", body=body, queue_id=k // TOPICS % QUEUES,
                queue_offset=k // (TOPICS * QUEUES), born_timestamp=base_ts + k // 50,
                born_host=("10.0.0.7", 52000), store_timestamp=base_ts + k // 50 + 1,
                store_host=("10.0.0.1", 10911),
                properties={"TAGS": "TagA", "KEYS": f"order-{k}",
                            "UNIQ_KEY": f"0A00000700002A9F0000{k:012X}"}))
        store.batch_append_as_leader(raws)
    return store


def dispatch_all(store, root: str) -> tuple[float, float, ReputService]:
    """CPU seconds and wall seconds to dispatch the whole store into a fresh ``root``."""
    shutil.rmtree(root, ignore_errors=True)
    reput = ReputService(root)
    end = store.ledger_end_index
    c0, t0 = time.process_time(), time.perf_counter()
    while reput.dispatch_up_to(store, end):
        pass
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    reput.close()
    return cpu, wall, reput


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python benchmarks/bench_broker_dispatch.py --messages 50000 --profile")
    ap.add_argument("--messages", type=int, default=200_000, help="messages in the store (default 200000)")
    ap.add_argument("--size", type=int, default=128, help="body bytes (default 128)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case, best kept (default 3)")
    ap.add_argument("--profile", action="store_true", help="also profile one run (cProfile)")
    args = ap.parse_args(argv)
    if args.messages < 1 or args.size < 0 or args.repeat < 1:
        ap.error("--messages and --repeat must be at least 1, --size at least 0")
    print(f"machine: {machine()}\ncommand: {command()}\nload: {os.getloadavg()[0]:.2f}")
    work = tempfile.mkdtemp(prefix="dledger-bench-dispatch-")
    try:
        t0 = time.perf_counter()
        store = build(os.path.join(work, "store"), args.messages, args.size)
        print(f"built {args.messages:,} messages in {time.perf_counter() - t0:.1f} s")
        rows = []
        root = os.path.join(work, "broker")
        for case in ("as written", "reopened"):
            if case == "reopened":
                store.close()
                store = DLedgerMmapFileStore.open(os.path.join(work, "store"), data_file_size=SEGMENT,
                                                  index_file_size=16 << 20)
            cpu, wall, reput = min((dispatch_all(store, root) for _ in range(args.repeat)), key=lambda r: r[0])
            n = args.messages
            assert reput.next_index == store.ledger_end_index + 1 and not reput.problems
            assert sum(cq.max_offset for cq in reput.queues.values()) == n
            rows.append([case, f"{n:,}", f"{args.size} B", f"{cpu * 1e6 / n:.2f}", f"{n / cpu:,.0f}",
                         f"{wall * 1e6 / n:.2f}"])
            if case == "as written" and args.profile:
                prof = cProfile.Profile()
                prof.enable()
                dispatch_all(store, root)
                prof.disable()
        print_table(f"ReputService.dispatch_up_to over the whole store (best of {args.repeat}; "
                    f"load {os.getloadavg()[0]:.2f})",
                    ["case", "messages", "body", "CPU us/message", "messages/s of CPU", "wall us/message"], rows)
        if args.profile:
            print("\ncProfile of one run, case 'as written'")
            st = pstats.Stats(prof, stream=sys.stdout).strip_dirs()
            st.sort_stats("cumulative").print_stats(25)
            st.sort_stats("tottime").print_stats(25)
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
