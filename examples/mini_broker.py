"""Three mini brokers (one Raft group), the master killed mid-stream, nothing acknowledged lost.

    python examples/mini_broker.py [--messages 300] [--topics 3] [--queues 2] [--dir DIR]

The parent starts ``dledger broker`` three times (each its own OS process: a DLedgerServer
over TCP with a DLedgerCommitLog on it, serving produce and pull), produces messages round the
topics and queues through ``BrokerClient``, SIGKILLs the master's process after a third of
them, keeps producing through the failover, then a fresh consumer pulls every queue to its
end. It prints what was sent, acknowledged (PUT_OK), consumed, duplicated and lost. A send
whose outcome is unclear (the connection broke after the request left) is sent again, so the
log may hold it twice: a duplicate is allowed only for such a message. Exit 0 only when no
acknowledged message is lost and every duplicate had an unclear send.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

from dledger.transport.loopback import free_ports

CONFIG = """# small segments for a demonstration (the default data segment is 1 GiB, allocated up front)
mapped_file_size_for_entry_data = {data}
mapped_file_size_for_entry_index = {index}
# a heartbeat every 500 ms: an election timeout of 1.5 s
heart_beat_time_interval_ms = 500
# a brand-new cluster: the new, empty stores may vote at once (never for a wiped node)
bootstrap = true
"""


def start_brokers(base: str, ids: list[str]) -> tuple[dict[str, subprocess.Popen], str]:
    ports = free_ports(2 * len(ids))
    peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(ids, ports))
    brokers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(ids, ports[len(ids):]))
    config = os.path.join(base, "broker.toml")
    with open(config, "w") as f:
        f.write(CONFIG.format(data=4 << 20, index=32 << 16))
    procs = {}
    for node_id in ids:
        log = open(os.path.join(base, f"{node_id}.log"), "wb")
        procs[node_id] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "broker", "--config", config, "--group", "mini", "--id", node_id,
             "--peers", peers, "--brokers", brokers, "--store-dir", base, "--log-level", "WARNING"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
    return procs, brokers


def stop_all(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def produce(client, n: int, topics: int, queues: int, kill_at: int, kill) -> dict:
    acked: dict[str, tuple[str, int, int]] = {}   # body -> (topic, queue, queue offset)
    unclear: set[str] = set()
    refused = 0
    for k in range(n):
        if k == kill_at:
            kill()
        topic, queue = f"Topic{k % topics}", (k // topics) % queues
        body = f"m{k}"
        for _attempt in range(5):
            r = client.send(topic, queue, body.encode(), tags=f"T{k % 2}", keys=[f"key-{k}"])
            if r.ok:
                acked[body] = (topic, queue, r.queue_offset)
                break
            if r.certain:           # refused: not in the log; give up on this message
                refused += 1
                break
            unclear.add(body)       # may be in the log: send it again (at least once)
    return {"acked": acked, "unclear": unclear, "refused": refused}


def consume(client, topics: int, queues: int, acked: dict, deadline_s: float = 30.0) -> tuple[list, int]:
    """Pull every queue to its end: past the highest acknowledged offset, then until empty."""
    want: dict[tuple[str, int], int] = {}
    for topic, queue, qo in acked.values():
        want[(topic, queue)] = max(want.get((topic, queue), -1), qo)
    got, gaps = [], 0
    deadline = time.monotonic() + deadline_s
    for t in range(topics):
        for q in range(queues):
            topic, offset = f"Topic{t}", 0
            while time.monotonic() < deadline:
                msgs, nxt = client.pull(topic, q, offset, 64)
                for k, m in enumerate(msgs):
                    gaps += m.queue_offset != offset + k
                got.extend(m.body.decode() for m in msgs)
                if nxt == offset and offset > want.get((topic, q), -1):
                    break
                if nxt == offset:
                    time.sleep(0.05)    # the broker has not dispatched the rest yet
                offset = nxt
    return got, gaps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300, help="messages to produce")
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--queues", type=int, default=2, help="queues per topic")
    parser.add_argument("--dir", help="where the stores and logs go, kept (default: a temporary folder, removed)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop the brokers on the way out
    from dledger.broker.client import BrokerClient

    base = args.dir or tempfile.mkdtemp(prefix="dledger-mini-broker-")
    os.makedirs(base, exist_ok=True)
    ids = ["n0", "n1", "n2"]
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs, brokers = start_brokers(base, ids)
        print(f"brokers: {brokers}", flush=True)
        killed = []

        def kill_master() -> None:
            master = client.master
            if master is None:
                raise RuntimeError("no master known when the kill was due")
            procs[master].kill()
            procs[master].wait(10)
            killed.append(master)
            print(f"master {master} killed (SIGKILL)", flush=True)

        with BrokerClient(brokers, timeout=3.0, send_deadline=15.0) as client:
            out = produce(client, args.messages, args.topics, args.queues, args.messages // 3, kill_master)
            print(f"master after the failover: {client.master}", flush=True)
        acked, unclear = out["acked"], out["unclear"]
        with BrokerClient(brokers, timeout=3.0, send_deadline=30.0) as consumer:
            got, gaps = consume(consumer, args.topics, args.queues, acked)
        counts = Counter(got)
        duplicated = {b for b, c in counts.items() if c > 1}
        lost = [b for b in acked if counts[b] == 0]
        bad_dups = sorted(duplicated - unclear)
        print(f"sent {args.messages}, acknowledged {len(acked)}, refused {out['refused']}, "
              f"unclear sends {len(unclear)}", flush=True)
        print(f"consumed {len(got)} ({len(counts)} distinct), duplicated {sum(counts[b] - 1 for b in duplicated)} "
              f"(of messages with no unclear send: {len(bad_dups)}), queue-offset gaps {gaps}", flush=True)
        print(f"lost {len(lost)}", flush=True)
        ok = not lost and not bad_dups and gaps == 0 and bool(killed)
        print("OK" if ok else f"FAILED: lost {lost[:10]} bad duplicates {bad_dups[:10]}", flush=True)
        return 0 if ok else 1
    finally:
        stop_all(procs)
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
