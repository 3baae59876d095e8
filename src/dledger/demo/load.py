"""The demo's load: a stream of unique entries appended through ``AsyncDLedgerClient``.

Entry ``seq`` (0 .. total-1) has the body ``body_for(seq, size)``: the 8-byte big-endian
sequence number, then filler, so every body is unique and its sequence number is readable back
from the log. ``in_flight`` workers share one client; each takes the next ``batch`` sequence
numbers and sends them with ``batch_append`` (all or none: the leader answers with the last
index and every position). What each call ends in:
- SUCCESS: every entry of the batch is acknowledged at ``index - len + 1 + k``, ``positions[k]``;
- ``ClusterUnavailableError``: no leader took it in the client's timeout, so certainly nothing
  was appended; the batch goes back to the queue (``retried`` counts those entries);
- ``AppendOutcomeUnknown``: the batch was sent and may be committed; it is not resent (that could
  store it twice) and its entries are recorded as unknown, to be looked up in the log later;
- ``AppendRefusedError``: the leader refused it: a failure of the run.

``schedule(done, result)`` is called about every 50 ms with the number of entries whose outcome is
decided (acknowledged or unknown), and awaited if it returns an awaitable (the appends go on
meanwhile): the demo kills and restarts nodes from it. With ``hold_at``, no batch from that
entry on is sent until ``result.release()`` (the schedule calls it after the kill): the appends
in flight at the kill go on, and the rest of the stream certainly comes after it, however fast
the load runs. An exception it
raises, or ``stall_s`` seconds without a decided entry, stops the load and is raised. Each
acknowledgement is recorded as an ``Ack`` (time since the start, latency, entries, node).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from dledger.client import AppendOutcomeUnknown, AppendRefusedError, AsyncDLedgerClient, ClusterUnavailableError
from dledger.progress_bar import Progress

SEQ_BYTES = 8
FILLER = b"dledger demo entry; " * 1024


def body_for(seq: int, size: int) -> bytes:
    head = seq.to_bytes(SEQ_BYTES, "big")
    return head + FILLER[:max(size - SEQ_BYTES, 0)]


def seq_of(body: bytes) -> int:
    return int.from_bytes(body[:SEQ_BYTES], "big")


class LoadStalled(RuntimeError):
    """No append was decided for ``stall_s`` seconds: the group stopped taking appends."""


@dataclass
class Ack:
    t_s: float          # when the answer came, seconds since the load started
    latency_s: float    # from sending the batch to its answer
    entries: int
    node_id: str        # the leader that answered


@dataclass
class LoadResult:
    total: int
    index: array                      # acknowledged index of each seq (-1: not acknowledged)
    pos: array                        # acknowledged position of each seq
    acks: list[Ack] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)      # seqs whose outcome is unknown
    unknown_calls: list[str] = field(default_factory=list)  # why, one per call
    retried: int = 0                  # entries sent again after ClusterUnavailableError
    refused: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    started_at: float = 0.0           # perf_counter() at the start
    body_size: int = 128
    released: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    def release(self) -> None:
        """Let the batches from ``hold_at`` on go (see the module docstring)."""
        self.released.set()

    @property
    def acknowledged(self) -> int:
        return sum(a.entries for a in self.acks)

    @property
    def last_index(self) -> int:
        return max(self.index, default=-1)


async def run_load(client: AsyncDLedgerClient, total: int, *, body_size: int = 128, batch: int = 128,
                   in_flight: int = 8, schedule: Callable[[int, "LoadResult"], object] | None = None,
                   progress: bool = True, stall_s: float = 60.0, hold_at: int | None = None) -> LoadResult:
    result = LoadResult(total, array("q", [-1]) * total, array("q", [-1]) * total, body_size=body_size)
    queue: deque[range] = deque(range(lo, min(lo + batch, total)) for lo in range(0, total, batch))
    decided = 0
    stop = asyncio.Event()
    failure: list[Exception] = []
    start = result.started_at = time.perf_counter()

    async def worker() -> None:
        nonlocal decided
        while queue and not stop.is_set():
            seqs = queue.popleft()
            if hold_at is not None and seqs.start >= hold_at and not result.released.is_set():
                queue.appendleft(seqs)
                held = asyncio.ensure_future(result.released.wait())
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait((held, stopped), return_when=asyncio.FIRST_COMPLETED)
                held.cancel()
                stopped.cancel()
                continue
            bodies = [body_for(s, body_size) for s in seqs]
            t0 = time.perf_counter()
            try:
                resp = await client.batch_append(bodies)
            except ClusterUnavailableError:
                queue.appendleft(seqs)                  # certainly not taken: send again
                result.retried += len(seqs)
                continue
            except AppendOutcomeUnknown as exc:
                result.unknown.extend(seqs)
                result.unknown_calls.append(str(exc))
                decided += len(seqs)
                continue
            except AppendRefusedError as exc:
                result.refused.append(str(exc))
                stop.set()
                return
            t1 = time.perf_counter()
            first = resp.index - len(seqs) + 1
            positions = list(resp.positions) if len(resp.positions) == len(seqs) else [-1] * len(seqs)
            for k, s in enumerate(seqs):
                result.index[s] = first + k
                result.pos[s] = positions[k]
            result.acks.append(Ack(t1 - start, t1 - t0, len(seqs), resp.local_id or resp.leader_id or "?"))
            decided += len(seqs)

    async def watch(bar: Progress) -> None:
        seen, since = -1, time.monotonic()
        while not stop.is_set():
            bar.update(decided)
            if decided != seen:
                seen, since = decided, time.monotonic()
            elif time.monotonic() - since > stall_s:
                failure.append(LoadStalled(f"no append was decided for {stall_s:g} s "
                                            f"({decided:,} of {total:,} done)"))
            if schedule is not None and not failure:
                try:
                    step = schedule(decided, result)
                    if inspect.isawaitable(step):
                        await step
                except Exception as exc:     # a node died, or could not be killed or started
                    failure.append(exc)
            if failure:
                stop.set()
                return
            await asyncio.sleep(0.05)

    with Progress(total, "appending", unit="entries", force=None if progress else False) as bar:
        watcher = asyncio.get_running_loop().create_task(watch(bar))
        try:
            await asyncio.gather(*(worker() for _ in range(in_flight)))
        finally:
            stop.set()
            await watcher
            bar.update(decided)
    if failure:
        raise failure[0]
    result.wall_s = time.perf_counter() - start
    return result
