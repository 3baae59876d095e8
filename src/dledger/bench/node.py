"""One benchmark node process: a ``DLedgerServer`` on TCP, driven by JSON lines on stdin.

    python -m dledger.bench.node --id n0 --peers "n0-127.0.0.1:P0;..." --store-dir DIR \
        [--group bench] [--durability page_cache|fsync] [--heart-beat-leak 3]

It prints ``{"op": "ready"}`` once the server listens, then answers each command line with one
JSON line on stdout (``progress`` lines may come before a ``load`` answer):
- ``{"op": "role"}``: this node's role, leader id and term;
- ``{"op": "load", "payload": 128, "seconds": 5, "rate": null, "batch": 64, "window": 16}``:
  when this node leads, run ``load.embedded_load`` on its server (as an embedding broker
  appends) and answer its summary; otherwise answer ``{"error": "not the leader"}``;
- ``{"op": "commit_one"}``: when this node leads, append one entry and answer the wall time
  (``committed_at``) its commit was known (the failover figure);
- ``{"op": "profile", "on": true}`` / ``{"op": "profile", "path": FILE}``: cProfile the node's
  event-loop thread (``load`` takes ``"profile": FILE`` for the leader);
- ``{"op": "quit"}``: shut the server down (the store is flushed) and exit 0.
With ``--broker`` the server is wrapped in a ``DLedgerCommitLog`` (the broker store, dispatching
on every node): ``load`` puts messages through it (``bench.broker_load``) instead of appending
raw bodies, and ``{"op": "stats", "reset": false}`` answers this node's dispatched messages,
their dispatch lag (a cumulative histogram, ms), the dispatched and committed indexes.
End of stdin counts as ``quit``; so the process never outlives its parent's pipe.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import sys
import time


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _first_commit(server, timeout_s: float = 10.0) -> str | None:
    """Append one entry and wait for its commit, so a new leader's first term is settled
    before the clock starts; why not, or None."""
    deadline = time.monotonic() + timeout_s
    why = "no answer"
    while time.monotonic() < deadline:
        try:
            resp = server.append(b"warm-up").result(max(0.01, deadline - time.monotonic()))
        except Exception as exc:  # timed out
            return f"the warm-up append did not commit: {exc!r}"
        if resp.code == 200:
            return None
        why = f"the warm-up append was answered {resp.code}"
        time.sleep(0.02)
    return why


def _broker_stats(commit_log, reset: bool) -> dict:
    """On the runtime thread: what this node dispatched and how late (then maybe start over)."""
    buckets, count, total = commit_log.dispatch_lag.snapshot()
    out = {"dispatched": count, "lag_sum_ms": total, "lag_ms": [[None if le == float("inf") else le, n]
                                                                for le, n in buckets],
           "dispatched_index": commit_log.reput.next_index - 1,
           "committed_index": commit_log.server.node.committed_index}
    if reset:
        commit_log.dispatch_lag.reset()
    return out


def build_config(args: argparse.Namespace):
    from dledger.config import DLedgerConfig

    return DLedgerConfig(group=args.group, self_id=args.id, peers=args.peers, store_base_dir=args.store_dir,
                         durability=args.durability, mapped_file_size_for_entry_data=256 << 20,
                         mapped_file_size_for_entry_index=32 << 20, max_pending_requests_num=100_000,
                         max_wait_ack_time_ms=10_000, max_heart_beat_leak=args.heart_beat_leak,
                         **({"max_batch_append_size": args.push_bytes} if args.push_bytes else {}),
                         **({"max_push_in_flight": args.push_window} if args.push_window else {})).validate()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dledger.bench.node", description=__doc__.splitlines()[0])
    p.add_argument("--id", required=True)
    p.add_argument("--peers", required=True)
    p.add_argument("--store-dir", required=True)
    p.add_argument("--group", default="bench")
    p.add_argument("--durability", choices=("page_cache", "fsync"), default="page_cache")
    p.add_argument("--heart-beat-leak", type=int, default=3,
                   help="heartbeats (100 ms) a follower misses before it stands for election (default 3)")
    p.add_argument("--push-bytes", type=int, default=None, help="max_batch_append_size (default the config's)")
    p.add_argument("--push-window", type=int, default=None, help="max_push_in_flight (default the config's)")
    p.add_argument("--broker", action="store_true", help="wrap the server in the broker store (DLedgerCommitLog)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {args.id} %(levelname)s %(name)s: %(message)s")

    from dledger.bench.broker_load import commit_log_submit
    from dledger.bench.load import callback_load, server_submit
    from dledger.core import Role
    from dledger.runtime.asyncio_runtime import AsyncioRuntime
    from dledger.server import DLedgerServer

    runtime = AsyncioRuntime()
    server = DLedgerServer(build_config(args), runtime=runtime).startup()
    commit_log = None
    if args.broker:
        from dledger.broker import DLedgerCommitLog
        commit_log = DLedgerCommitLog(server)
    profiler = None
    _say({"op": "ready", "id": args.id})
    try:
        for line in sys.stdin:
            try:
                cmd = json.loads(line)
            except ValueError:
                _say({"op": "error", "error": f"not JSON: {line.strip()[:80]}"})
                continue
            op = cmd.get("op")
            if op == "quit":
                break
            if op == "role":
                meta = server.metadata()
                _say({"op": "role", "id": args.id, "role": meta["role"], "leader_id": meta["leader_id"],
                      "term": meta["term"], "committed_index": meta["committed_index"]})
            elif op == "commit_one":
                # one append if this node leads: the wall time its commit was known
                if server.role is not Role.LEADER:
                    _say({"op": "commit_one", "id": args.id, "role": server.role.value if server.role else None})
                    continue
                try:
                    resp = server.append(b"first").result(5)
                except Exception as exc:  # the answer did not come in time
                    _say({"op": "commit_one", "id": args.id, "error": repr(exc)})
                    continue
                _say({"op": "commit_one", "id": args.id, "code": resp.code,
                      "committed_at": time.time() if resp.code == 200 else None})
            elif op == "profile":
                # cProfile of the node's event-loop thread (where the node's work runs), from
                # ``{"op": "profile", "on": true}`` to ``{"op": "profile", "path": FILE}``
                if cmd.get("on"):
                    profiler = cProfile.Profile(time.thread_time)
                    runtime.run_sync(profiler.enable)
                elif profiler is not None:
                    runtime.run_sync(profiler.disable)
                    profiler.dump_stats(cmd["path"])
                    profiler = None
                _say({"op": "profile", "id": args.id})
            elif op == "load":
                if server.role is not Role.LEADER:
                    _say({"op": "load", "id": args.id, "error": "not the leader"})
                    continue
                warm = _first_commit(server)
                if warm is not None:
                    _say({"op": "load", "id": args.id, "error": warm})
                    continue
                load_profiler = cProfile.Profile(time.thread_time) if cmd.get("profile") else None
                if load_profiler is not None:
                    runtime.run_sync(load_profiler.enable)
                submit = server_submit(server) if commit_log is None else commit_log_submit(commit_log)
                res = callback_load(submit, int(cmd["payload"]), float(cmd["seconds"]), rate=cmd.get("rate"),
                                    batch=int(cmd["batch"]) if cmd.get("batch") is not None else None,
                                    window=int(cmd.get("window", 16)),
                                    warmup_s=float(cmd.get("warmup_s", 0.5)),
                                    on_progress=lambda n: _say({"op": "progress", "committed": n}))
                if load_profiler is not None:
                    runtime.run_sync(load_profiler.disable)
                    load_profiler.dump_stats(cmd["profile"])
                _say({"op": "load", "id": args.id, **res.summary(),
                      "still_leader": server.role is Role.LEADER})
            elif op == "stats" and commit_log is not None:
                _say({"op": "stats", "id": args.id, **runtime.run_sync(lambda: _broker_stats(commit_log,
                                                                                             cmd.get("reset")))})
            else:
                _say({"op": "error", "error": f"unknown op {op!r}"})
    finally:
        if commit_log is not None:
            commit_log.close()
        server.shutdown()
        runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
