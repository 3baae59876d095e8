"""Three real nodes: each its own OS process embedding a ``DLedgerServer`` over TCP.

    python examples/three_nodes.py [--dir DIR]

The parent starts ``python three_nodes.py node <id>`` three times (what a host such as a
message broker does on three machines), appends through ``DLedgerClient``, kills the leader's
process, appends again through the new leader, reads everything back, and stops the nodes.
Every node runs the code of ``node()`` below: the library embedded in a host process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dledger.transport.loopback import free_ports


def node(self_id: str, peers: str, store_dir: str) -> None:
    """One node: a host process embedding one member of group ``orders``."""
    from dledger import DLedgerConfig, DLedgerServer

    # small segments for a demonstration (the default data segment is 1 GiB, allocated up front);
    # bootstrap: these three stores start a brand-new cluster, so a node that had not caught up
    # yet when the leader is killed may still vote (docs/embedding.md; never for a node whose
    # disk was replaced)
    config = DLedgerConfig(group="orders", self_id=self_id, peers=peers, store_base_dir=store_dir,
                           durability="fsync", heart_beat_time_interval_ms=200, bootstrap=True,
                           mapped_file_size_for_entry_data=16 << 20,
                           mapped_file_size_for_entry_index=32 << 16)
    server = DLedgerServer(config)
    server.add_role_change_handler(lambda change: print(f"{self_id}: {change.role.name} in term "
                                                        f"{change.term}", flush=True))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.startup()
    stop.wait()
    server.shutdown()                      # flushes and closes the store




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="where the three stores go, kept (default: a temporary folder, "
                                      "removed at the end)")
    args = parser.parse_args()
    from dledger.client import DLedgerClient

    store_dir = args.dir or tempfile.mkdtemp(prefix="dledger-three-")
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(free_ports(3)))
    procs = {f"n{k}": subprocess.Popen([sys.executable, __file__, "node", f"n{k}", peers, store_dir])
             for k in range(3)}
    try:
        with DLedgerClient(peers, group="orders", timeout_s=20) as client:
            first = [client.append(f"order #{i}".encode()) for i in range(3)]
            leader = client.leader_id
            print(f"appended 3 entries through {leader}: indexes {[r.index for r in first]}", flush=True)
            procs[leader].kill()           # the leader's machine dies
            procs[leader].wait(10)
            after = client.append(b"order #3")
            print(f"{leader} killed; order #3 at index {after.index} through {client.leader_id}",
                  flush=True)
            bodies = [client.get(i).body for i in range(after.index + 1)]
            print("read back:", [b.decode() for b in bodies if b], flush=True)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    if args.dir:
        print(f"stores in {store_dir}")
    else:
        shutil.rmtree(store_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "node":
        node(*sys.argv[2:])
    else:
        sys.exit(main())
