"""CPU per append made one at a time: a 3-node cluster in one process, each turn of each node timed.

    python benchmarks/bench_one_append.py [--appends N] [--payload B] [--rounds R]

Three ``DLedgerServer``s on the asyncio runtime and the in-process transport (file stores in a
temporary directory, removed after), the leader elected first. Then ``--appends`` appends of
``--payload`` bytes, one at a time: each waits for its SUCCESS before the next is made, so
every append pays for the whole round (the leader's turn that proposes it, each follower's turn
for the push, the leader's turns for the answers), with nothing to share it with. It prints the
event-loop thread's CPU time per append (the three nodes together), and then, per node and
kind of turn (``Driver.propose_many``, ``on_envelope`` per message type and push kind, ``_on_timer``), how
many such turns an append costs and their time per append and per turn. This is the cost that
one-at-a-time latency is made of beyond the network's wake-ups (docs/benchmarks.md); batched
appends share it.

examples:

    python benchmarks/bench_one_append.py
    python benchmarks/bench_one_append.py --appends 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import command, machine, print_table  # noqa: E402

from dledger import DLedgerConfig, DLedgerServer  # noqa: E402
from dledger.core import Role  # noqa: E402
from dledger.protocol import PushEntryRequest  # noqa: E402
from dledger.runtime import driver as driver_module  # noqa: E402
from dledger.runtime.asyncio_runtime import AsyncioRuntime  # noqa: E402
from dledger.transport.inproc import Hub  # noqa: E402

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
TURNS = ("propose_many", "on_envelope", "_on_timer")


def _message_kind(msg) -> str:
    """The message's type, and for a push its kind (``PushEntryRequest APPEND``): an idle COMMIT
    push (the commit index sent on its own, when no append followed within
    ``COMMIT_FORWARD_DELAY_MS``) is counted apart from the pushes that carry entries."""
    name = type(msg).__name__
    return f"{name} {msg.type.name}" if isinstance(msg, PushEntryRequest) else name


class TurnClock:
    """Wraps the driver's entry points to time each turn, keyed by (node, turn, message type)."""

    def __init__(self) -> None:
        self.seconds: dict = collections.defaultdict(float)
        self.count: collections.Counter = collections.Counter()
        self.on = False
        self._originals = {name: getattr(driver_module.Driver, name) for name in TURNS}

    def install(self) -> None:
        for name, original in self._originals.items():
            setattr(driver_module.Driver, name, self._timed(name, original))

    def remove(self) -> None:
        for name, original in self._originals.items():
            setattr(driver_module.Driver, name, original)

    def _timed(self, name, original):
        clock = self

        def timed(driver, *args, **kwargs):
            if not clock.on:
                return original(driver, *args, **kwargs)
            t = time.perf_counter()
            try:
                return original(driver, *args, **kwargs)
            finally:
                kind = _message_kind(args[0].msg) if name == "on_envelope" else ""
                key = (driver.node.member_state.self_id, name, kind)
                clock.seconds[key] += time.perf_counter() - t
                clock.count[key] += 1
        return timed


def run(appends: int, payload: int, clock: TurnClock) -> tuple[float, str]:
    base = tempfile.mkdtemp(prefix="dledger-bench-")
    runtime, hub = AsyncioRuntime(), Hub()
    elected = threading.Event()
    servers = []
    try:
        for node_id in ("n0", "n1", "n2"):
            cfg = DLedgerConfig(group="bench", self_id=node_id, peers=PEERS, store_base_dir=base, store_type="file",
                                mapped_file_size_for_entry_data=64 << 20, mapped_file_size_for_entry_index=8 << 20)
            server = DLedgerServer(cfg, runtime=runtime, hub=hub)
            server.add_role_change_handler(lambda ch: ch.role is Role.LEADER and elected.set())
            servers.append(server.startup())
        if not elected.wait(10):
            raise SystemExit("no leader elected within 10 s")
        leader = next(s for s in servers if s.is_leader)
        body = b"x" * payload
        for _ in range(200):                         # warm up: the first pushes, the page windows
            leader.append(body).result(5)
        cpu = lambda: runtime.run_sync(time.thread_time)  # noqa: E731 - the loop thread's clock
        clock.on = True
        c0 = cpu()
        for _ in range(appends):
            leader.append(body).result(5)
        c1 = cpu()
        clock.on = False
        return (c1 - c0) / appends, leader.driver.node.member_state.self_id
    finally:
        for server in servers:
            server.shutdown()
        runtime.close()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="examples:" + __doc__.split("examples:")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=3000, help="appends per round (default 3000)")
    ap.add_argument("--payload", type=int, default=128, help="body size in bytes (default 128)")
    ap.add_argument("--rounds", type=int, default=2, help="fresh clusters, one after the other (default 2)")
    args = ap.parse_args()
    print(f"command: {command()}\nmachine: {machine()}\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r in range(args.rounds):
        clock = TurnClock()
        clock.install()
        try:
            per_append, leader = run(args.appends, args.payload, clock)
        finally:
            clock.remove()
        n = args.appends
        rows = [[("L " if node == leader else "") + node, turn, kind, f"{clock.count[k] / n:.2f}",
                 f"{clock.seconds[k] / n * 1e6:.1f}", f"{clock.seconds[k] / clock.count[k] * 1e6:.1f}"]
                for k in sorted(clock.seconds, key=lambda k: -clock.seconds[k])
                for node, turn, kind in [k] if clock.seconds[k] / n * 1e6 >= 0.5]
        print_table(f"round {r + 1}: {per_append * 1e6:.1f} µs of event-loop CPU per append (three nodes), "
                    f"{args.payload} B bodies, {n} appends one at a time",
                    ["node", "turn", "message", "turns/append", "µs/append", "µs/turn"], rows)


if __name__ == "__main__":
    main()
