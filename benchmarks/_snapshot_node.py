"""One node of ``bench_snapshot.py``'s end-to-end runs: a ``DLedgerServer`` with a
``HashChainStateMachine`` that can be stopped and started again on its store.

``SnapshotNode`` holds the server; ``handle(node, cmd, progress)`` answers one command (a
dict with ``op``), the same way whether the node runs in the benchmark's process (three nodes
on one runtime and an in-process hub) or in a process of its own on TCP, where this file's
``main`` reads the commands as JSON lines on stdin and writes each answer as one JSON line
(``progress`` lines may come first; ``ready`` once the server runs):

- ``state``: role, applied index, log begin and end;
- ``append`` (``count``, ``body``): on the leader, ``count`` entries of ``body`` zero bytes
  through ``batch_append`` (1 MiB of bodies a call, 16 calls in flight); answers the seconds;
- ``snapshot`` (``padding``): on the leader, a snapshot whose state machine writes
  ``padding`` bytes of filler; waits until the log is trimmed after it; answers its index,
  data size, the log's begin and end;
- ``stop``; ``start`` (``until``: an index): start the server again and answer the seconds
  until it has applied ``until`` (polled every 5 ms), and the snapshots it loaded;
- ``digest`` (``index``): the state machine's digest after entry ``index``, hex;
- ``quit`` (process only).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from dledger import DLedgerConfig, DLedgerServer  # noqa: E402
from dledger.sim.hash_chain import HashChainStateMachine  # noqa: E402

MiB = 1 << 20


class SnapshotNode:
    def __init__(self, node_id: str, peers: str, base: str, config: dict, runtime, hub=None) -> None:
        self.node_id, self.peers, self.base, self.config = node_id, peers, base, config
        self.runtime, self.hub = runtime, hub
        self.server: DLedgerServer | None = None
        self.sm: HashChainStateMachine | None = None

    def start(self) -> None:
        cfg = DLedgerConfig(group="snap", self_id=self.node_id, peers=self.peers, store_base_dir=self.base,
                            transport="inproc" if self.hub is not None else "tcp", **self.config)
        self.sm = HashChainStateMachine(self.node_id)
        self.server = DLedgerServer(cfg, runtime=self.runtime, hub=self.hub, state_machine=self.sm).startup()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()

    def on_loop(self, fn):
        return self.runtime.run_sync(fn)

    def state(self) -> dict:
        s = self.server
        if s is None or not s.started:
            return {"role": None}
        return self.on_loop(lambda: {"role": s.role.value if s.role else None, "applied": s.node.applied_index,
                                     "begin": s.store.ledger_before_begin_index, "end": s.store.ledger_end_index})

    def append(self, count: int, body_size: int, progress) -> float:
        body = bytes(body_size)
        per_call = max(1, min(1024, MiB // max(body_size, 1)))
        bodies = [body] * per_call
        inflight: list = []
        done = 0
        t0 = last = time.perf_counter()
        while done < count:
            n = min(per_call, count - done)
            inflight.append(self.server.batch_append(bodies if n == per_call else [body] * n))
            done += n
            if len(inflight) >= 16:
                _check(inflight.pop(0).result(120))
            if time.perf_counter() - last > 5:
                last = time.perf_counter()
                progress(f"{self.node_id}: {done:,} of {count:,} entries appended, {last - t0:.0f} s")
        for f in inflight:
            _check(f.result(120))
        return time.perf_counter() - t0

    def snapshot(self, padding: int, trim_timeout_s: float = 30.0) -> dict:
        s = self.server
        before = self.state()["begin"]
        self.sm.padding = padding
        t0 = time.perf_counter()
        index = s.snapshot().result(900)
        took = time.perf_counter() - t0
        deadline = time.monotonic() + trim_timeout_s   # the trim runs after the snapshot, on the loop
        while (st := self.state())["begin"] <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        size = os.path.getsize(os.path.join(s.store.store_dir, "snapshot", f"snapshot_{index}", "data"))
        return {"index": index, "bytes": size, "seconds": took, "begin": st["begin"], "end": st["end"]}

    def start_until(self, until: int, timeout_s: float, progress) -> dict:
        t0 = last = time.perf_counter()
        self.start()
        while True:
            applied = self.on_loop(lambda: self.server.node.applied_index)
            now = time.perf_counter()
            if applied >= until:
                return {"seconds": now - t0, "snapshots_loaded": self.sm.snapshots_loaded}
            if now - t0 > timeout_s:
                raise RuntimeError(f"{self.node_id} applied {applied} of {until} after {timeout_s} s")
            if now - last > 5:
                last = now
                progress(f"{self.node_id}: applied {applied:,} of {until:,}, {now - t0:.0f} s")
            time.sleep(0.005)


def _check(resp) -> None:
    if resp.code != 200:
        raise RuntimeError(f"batch_append answered {resp.code}")


def handle(node: SnapshotNode, cmd: dict, progress) -> dict:
    op = cmd["op"]
    if op == "state":
        return node.state()
    if op == "append":
        return {"seconds": node.append(int(cmd["count"]), int(cmd["body"]), progress)}
    if op == "snapshot":
        return node.snapshot(int(cmd["padding"]))
    if op == "stop":
        node.stop()
        return {}
    if op == "start":
        return node.start_until(int(cmd["until"]), float(cmd.get("timeout", 900)), progress)
    if op == "digest":
        return {"digest": node.sm.states[int(cmd["index"])].hex()}
    raise ValueError(f"unknown op {op!r}")


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", required=True)
    p.add_argument("--peers", required=True)
    p.add_argument("--store-dir", required=True)
    p.add_argument("--config", required=True, help="DLedgerConfig fields as a JSON object")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {args.id} %(levelname)s %(name)s: %(message)s")
    from dledger.runtime.asyncio_runtime import AsyncioRuntime

    runtime = AsyncioRuntime()
    node = SnapshotNode(args.id, args.peers, args.store_dir, json.loads(args.config), runtime)
    node.start()
    _say({"op": "ready", "id": args.id})
    lock = threading.Lock()

    def progress(text: str) -> None:
        with lock:
            _say({"op": "progress", "text": text})

    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("op") == "quit":
                break
            try:
                _say({"op": cmd["op"], **handle(node, cmd, progress)})
            except Exception as exc:  # the parent reports it
                _say({"op": cmd["op"], "error": repr(exc)})
    finally:
        node.stop()
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
