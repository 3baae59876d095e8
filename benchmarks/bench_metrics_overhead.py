"""What measuring costs per operation: the metrics hooks and the log context, timed in isolation.

    python benchmarks/bench_metrics_overhead.py [--repeat N]

Prints nanoseconds per unit (best of ``--repeat`` runs, so other load on the machine inflates
it least) for each thing the hot path does because of ``dledger.metrics`` or
``runtime.log_context``:
- metrics off: the server's stamp of a host call (the runtime's clock, behind a ``None``
  check) and the driver storing its log context at an entry point (every entry, on or off);
- metrics on: the finer stamp, one append completion seen by the ready listener (latency,
  entries and bytes histograms), one APPEND push leaving (stamped), one push answer arriving
  (the receiver wrapper: replicate histograms), one client append request arriving (stamped).
``bench_inproc_cluster.py --metrics`` measures the same end to end.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import timeit
from concurrent.futures import Future

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from dledger.core.node import Completion, Ready  # noqa: E402
from dledger.metrics.observer import NodeMetrics  # noqa: E402
from dledger.protocol import (AppendEntryRequest, AppendEntryResponse, Envelope, PushEntryRequest,  # noqa: E402
                              PushEntryResponse)
from dledger.runtime.asyncio_runtime import AsyncioRuntime  # noqa: E402
from dledger.runtime.driver import APPEND, Op  # noqa: E402
from dledger.runtime.log_context import CURRENT, LogContext  # noqa: E402

N = 64          # completions or messages per Ready


def best(stmt, number: int, repeat: int, per: int = 1) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number / per * 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    print(f"# {' '.join(sys.argv)}")
    print(f"# {platform.python_version()} {platform.system()} {platform.machine()}, {os.cpu_count()} cpus")
    rt = AsyncioRuntime()
    m = NodeMetrics("g", "n0")
    m.replicate["n1"] = type(m.append)()
    ctx = LogContext("g", "n0")

    class Server:            # the stamp of DLedgerServer._now, with and without metrics
        def __init__(self, metrics):
            self._metrics, self.runtime = metrics, rt

        def _now(self):
            metrics = self._metrics
            return self.runtime.now_ms() if metrics is None else metrics.clock_ms()

    off, on = Server(None), Server(m)
    ok = AppendEntryResponse(code=200, index=1, positions=[0])
    completions = [Completion(Op(Future(), APPEND, m.clock_ms(), 128), ok) for _ in range(N)]
    ready_done = Ready([], completions)
    pushes = [Envelope("n0", "n1", 1000 + i, False, PushEntryRequest(count=32, entries=bytes(32 * 176)))
              for i in range(N)]
    ready_push = Ready(pushes, [])
    answer = Envelope("n1", "n0", 0, True, PushEntryResponse(code=200))
    request = Envelope("c1", "n0", 7, False, AppendEntryRequest(body=bytes(128)))
    deliver = m.receiver(lambda env: None)
    noop = lambda env: None        # noqa: E731

    def answers():
        for i in range(N):
            m._pushes[i] = (0.0, 32, 5632)
            answer.request_id = i
            deliver(answer)

    rows = [
        ("reference: Future() and Op() of one append", best(lambda: Op(Future(), APPEND, 0.0, 128), 200_000,
                                                           a.repeat)),
        ("off: stamp of a host call", best(off._now, 200_000, a.repeat)),
        ("off/on: log context stored at a driver entry", best(lambda: setattr(CURRENT, "ctx", ctx), 200_000, a.repeat)),
        ("on: stamp of a host call", best(on._now, 200_000, a.repeat)),
        ("on: an append completion seen", best(lambda: m.on_ready(ready_done), 2_000, a.repeat, N)),
        ("on: an APPEND push leaving", best(lambda: m.on_ready(ready_push), 2_000, a.repeat, N)),
        ("on: a push answer arriving (receiver)", best(answers, 2_000, a.repeat, N)
         - best(lambda: [noop(answer) for _ in range(N)], 2_000, a.repeat, N)),
        ("on: a client append arriving (receiver)", best(lambda: deliver(request), 200_000, a.repeat)),
    ]
    rt.close()
    print(f"{'what':<48}{'ns':>8}")
    for name, ns in rows:
        print(f"{name:<48}{ns:>8.0f}")


if __name__ == "__main__":
    main()
