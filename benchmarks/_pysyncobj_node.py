"""One PySyncObj node process for ``bench_tcp_cluster.py --vs-pysyncobj`` (benchmark only;
PySyncObj is never a dependency of dledger: ``.venv/bin/pip install pysyncobj``).

A replicated append-only list (one ``@replicated`` method), its Raft log in a journal file
under ``--store-dir`` (PySyncObj's journal is an mmap it never syncs while running, so it is
the peer of dledger's ``page_cache`` mode). It speaks the JSON lines of ``dledger.bench.node``
(``ready``, ``role``, ``load``, ``quit``), and its ``load`` runs the same
``dledger.bench.load.callback_load`` with ``append(body, callback=...)``: a call's latency
ends when PySyncObj calls back with the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from dledger.bench.load import callback_load  # noqa: E402

try:
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
except ImportError:  # pragma: no cover - the parent checks first
    sys.exit("pysyncobj is not installed: .venv/bin/pip install pysyncobj")


class ReplicatedList(SyncObj):
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self.count = 0
        self.bytes = 0

    @replicated
    def append(self, body: bytes) -> int:
        # an append-only list of the bodies' sizes: keeping every body would hold the whole
        # run in memory; the log itself (the journal) keeps the bodies
        self.count += 1
        self.bytes += len(body)
        return self.count


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--id", required=True)
    p.add_argument("--peers", required=True)
    p.add_argument("--store-dir", required=True)
    args = p.parse_args()
    addrs = dict(part.split("-", 1) for part in args.peers.split(";"))
    me = addrs[args.id]
    conf = SyncObjConf(journalFile=os.path.join(args.store_dir, "journal"), dynamicMembershipChange=False,
                       commandsQueueSize=200_000)
    obj = ReplicatedList(me, [a for i, a in addrs.items() if i != args.id], conf)
    _say({"op": "ready", "id": args.id})

    def submit(bodies, done) -> None:
        for body in bodies:        # PySyncObj has no batch call: one replicated call per body
            obj.append(body, callback=lambda _res, err, _d=done: _d(200 if err == FAIL_REASON.SUCCESS else int(err)))

    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "quit":
                break
            if op == "role":
                leader = obj._getLeader()
                _say({"op": "role", "id": args.id, "role": "LEADER" if obj._isLeader() and obj.isReady()
                      else "FOLLOWER", "leader_id": str(leader) if leader else None})
            elif op == "load":
                if not obj._isLeader():
                    _say({"op": "load", "id": args.id, "error": "not the leader"})
                    continue
                res = callback_load(submit, int(cmd["payload"]), float(cmd["seconds"]), rate=cmd.get("rate"),
                                    batch=1, window=int(cmd.get("window", 1000)),
                                    warmup_s=float(cmd.get("warmup_s", 0.5)),
                                    on_progress=lambda n: _say({"op": "progress", "committed": n}))
                _say({"op": "load", "id": args.id, **res.summary(), "still_leader": obj._isLeader()})
            else:
                _say({"op": "error", "error": f"unknown op {op!r}"})
    finally:
        obj.destroy()
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
