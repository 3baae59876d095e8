"""The broker store's load for the 3-process benchmark: puts on a ``DLedgerCommitLog``.

``commit_log_submit(commit_log)`` is a ``submit`` for ``load.callback_load``: one body is one
``put_message_async``, several are one ``put_messages_async`` (one append), spread over
``topics`` x ``queues`` with a tag and a key each, as ``benchmarks/bench_broker.py`` has always
put them; ``done`` gets SUCCESS only when every message of the call is PUT_OK, else the first
other status's name. ``lag_percentile`` reads a quantile off a cumulative histogram snapshot
(the broker's dispatch lag), as the bucket's upper bound.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

from dledger.bench.load import SUCCESS


def commit_log_submit(commit_log, topics: int = 4, queues: int = 4) -> Callable:
    from dledger.broker.put_result import PutMessageStatus

    ok = PutMessageStatus.PUT_OK
    seq = itertools.count()
    names = [f"T{t}" for t in range(topics)]

    def message(body: bytes) -> dict:
        n = next(seq)
        return {"topic": names[n % topics], "queue_id": n // topics % queues, "body": body, "tags": "tag",
                "keys": [f"k{n}"]}

    def submit(bodies: list[bytes], done: Callable) -> None:
        if len(bodies) == 1:
            m = message(bodies[0])
            fut = commit_log.put_message_async(m.pop("topic"), m.pop("queue_id"), m.pop("body"), **m)
        else:
            fut = commit_log.put_messages_async([message(b) for b in bodies])

        def on_done(f) -> None:
            try:
                res = f.result()
            except Exception as exc:  # noqa: BLE001 - reported as a failure code
                done(type(exc).__name__)
                return
            bad = next((r for r in (res if isinstance(res, list) else [res]) if r.status is not ok), None)
            done(SUCCESS if bad is None else bad.status.name)

        fut.add_done_callback(on_done)
    return submit


def lag_percentile(buckets: Sequence[Sequence], q: float) -> float | None:
    """The ``q`` quantile of a cumulative ``[(le, count), ...]`` snapshot (last ``le`` None or
    inf), as the upper bound of its bucket; None when empty or above the last bound."""
    if not buckets or not buckets[-1][1]:
        return None
    need = q * buckets[-1][1]
    for le, count in buckets:
        if count >= need:
            return None if le is None or le == float("inf") else float(le)
    return None


__all__ = ["commit_log_submit", "lag_percentile"]
