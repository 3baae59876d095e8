"""Client history and the commit-log history checker (docs/simulation.md, "Checkers").

Every ``Cluster.append`` is one ``Operation`` with its invoke and complete virtual times and
its outcome: ``ok`` (SUCCESS), ``fail`` (a code that guarantees nothing was appended: the
node was not leader, was transferring, was full, or refused the body) or ``info`` (anything
else, or never completed: the entry may or may not be in the log).

``check_commit_log(ops, log)`` checks, in linear-ish time, against the agreed committed log
(a list of ``LogEntry`` from index 0 or the log's first index):
1. every ok append is in the log at its returned index, with its body, term and pos;
2. no two ok appends share an index;
3. real-time order: if A was acknowledged before B was invoked, index(A) < index(B);
4. no body appears in the log more often than it was invoked by ok/info operations (so a
   failed append never appears and a timed-out one appears at most once), and (``strict``)
   every entry in the log comes from some invoked operation.
Bodies should be unique per operation for (4) to be sharp; ``Cluster.append`` users
normally make them so. ``write`` operations (append, then wait for the state machine) are
appends for this checker.

Reads (``kind="read"``, ``Cluster.read``) are in the same history with their mode and the
index they returned. ``check_reads(ops, log)`` checks them:
5. a SUCCESS read in a linearizable mode (every mode but ``UNSAFE_READ``) returns an index at
   least the index of every append acknowledged before the read was invoked (otherwise the
   read is stale: a client could miss its own acknowledged write);
6. a SUCCESS read in any mode returns an index the agreed committed log holds (a read is
   never served beyond what was committed).
``UNSAFE_READ`` promises no freshness and is exempt from (5).

Gets (``kind="get"``, ``Cluster.get``: a client's ``GetEntriesRequest`` over the network) are
in the history with their mode, the index asked for and, when answered SUCCESS, the entry's
body, term and pos. ``check_reads`` checks them too:
7. a SUCCESS get returns the entry the agreed committed log holds at that index;
8. a get in a linearizable mode is never answered INDEX_OUT_OF_RANGE for an index that an
   append acknowledged before the get was invoked reached (the entry was committed then: the
   get is stale, the entry seems to vanish). ``UNSAFE_READ`` gets are exempt from (8).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from dledger.entry import decode
from dledger.protocol import DLedgerResponseCode as Code, ReadMode

#: the kinds of operation that append (the rest, ``read`` and ``get``, only look)
APPENDS = ("append", "write")
DEFINITE_FAILURES = frozenset({Code.NOT_LEADER, Code.LEADER_PENDING_FULL, Code.LEADER_TRANSFERRING,
                               Code.REQUEST_WITH_EMPTY_BODYS, Code.UNEXPECTED_ARGUMENT, Code.DISK_FULL})


@dataclass(slots=True)
class Operation:
    op_id: int
    body: bytes
    node: str | None
    invoke_ms: int
    complete_ms: int | None = None
    code: int | None = None
    index: int = -1
    term: int = -1
    pos: int = -1
    kind: str = "append"
    #: for reads and gets: the ``ReadMode``
    mode: int = -1

    @property
    def outcome(self) -> str:
        if self.code == Code.SUCCESS:
            return "ok"
        if self.code is not None and self.code in DEFINITE_FAILURES:
            return "fail"
        return "info"

    def __str__(self) -> str:
        what = ReadMode(self.mode).name if self.kind not in APPENDS else repr(self.body[:16])
        return (f"op#{self.op_id} {self.kind} {what} via {self.node} invoked {self.invoke_ms}ms "
                f"completed {self.complete_ms}ms code {self.code} index {self.index}")


class LogEntry(NamedTuple):
    index: int
    term: int
    pos: int
    magic: int
    body: bytes


class History:
    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def invoke(self, body: bytes, node: str | None, now_ms: int, kind: str = "append") -> Operation:
        op = Operation(len(self.ops), body, node, now_ms, kind=kind)
        self.ops.append(op)
        return op

    def invoke_read(self, mode: int, node: str | None, now_ms: int) -> Operation:
        op = Operation(len(self.ops), b"", node, now_ms, kind="read", mode=int(mode))
        self.ops.append(op)
        return op

    def invoke_get(self, index: int, mode: int, node: str | None, now_ms: int) -> Operation:
        op = Operation(len(self.ops), b"", node, now_ms, kind="get", mode=int(mode), index=index)
        self.ops.append(op)
        return op

    @staticmethod
    def complete_get(op: Operation, now_ms: int, resp) -> None:
        """``resp``: the node's ``GetEntriesResponse`` (its first record, decoded, on SUCCESS)."""
        op.complete_ms = now_ms
        op.code = int(resp.code)
        if resp.code == Code.SUCCESS and resp.entries:
            entry = decode(resp.entries[0])
            op.body, op.term, op.pos = bytes(entry.body), entry.term, entry.pos

    @staticmethod
    def complete(op: Operation, now_ms: int, resp) -> None:
        op.complete_ms = now_ms
        op.code = int(resp.code)
        op.index, op.term, op.pos = resp.index, resp.term, resp.pos

    def __iter__(self):
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def counts(self) -> Counter:
        """Outcomes of the appends (and writes)."""
        return Counter(op.outcome for op in self.ops if op.kind in APPENDS)

    def read_counts(self) -> Counter:
        """``(mode name, outcome)`` of the reads."""
        return Counter((ReadMode(op.mode).name, op.outcome) for op in self.ops if op.kind == "read")


def check_commit_log(ops: list[Operation], log: list[LogEntry], *, strict: bool = True,
                     normal_magic: int = 1) -> list[str]:
    """Problems found (empty when the history is consistent with the log)."""
    problems: list[str] = []
    ops = [op for op in ops if op.kind in APPENDS]
    by_index = {e.index: e for e in log}
    acked = [op for op in ops if op.outcome == "ok"]
    # 1 + 2
    seen: dict[int, Operation] = {}
    for op in acked:
        e = by_index.get(op.index)
        if e is None:
            problems.append(f"{op}: acknowledged but index {op.index} is not in the committed log")
        elif e.body != op.body:
            problems.append(f"{op}: committed log holds {e.body[:16]!r} at index {op.index}")
        elif (e.term, e.pos) != (op.term, op.pos):
            problems.append(f"{op}: acknowledged term/pos {op.term}/{op.pos}, log has {e.term}/{e.pos}")
        if op.index in seen:
            problems.append(f"{op} and {seen[op.index]} were both acknowledged at index {op.index}")
        seen[op.index] = op
    # 3: real-time order
    for op, best in _latest_acked_before(acked, acked):
        if best is not None and best.index >= op.index:
            problems.append(f"{best} was acknowledged before {op} was invoked, yet its index is not smaller")
    # 4: occurrences
    allowed = Counter(op.body for op in ops if op.outcome != "fail")
    failed = {op.body for op in ops if op.outcome == "fail"}
    present = Counter(e.body for e in log if e.magic == normal_magic)
    for body, n in present.items():
        if body in allowed:
            if n > allowed[body]:
                problems.append(f"body {body[:16]!r} is in the log {n} times but was appended {allowed[body]} times"
                                " (not counting failed appends)")
        elif body in failed:
            problems.append(f"body {body[:16]!r} of a failed append is in the log")
        elif strict:
            problems.append(f"body {body[:16]!r} is in the log but no client appended it")
    return problems


def _latest_acked_before(acked: list[Operation], ops: list[Operation]):
    """Each of ``ops`` in invocation order, with the acknowledged operation of highest index
    among ``acked`` that completed before it was invoked (None if none did)."""
    by_complete = sorted(acked, key=lambda o: o.complete_ms)
    k = 0
    best: Operation | None = None
    for op in sorted(ops, key=lambda o: o.invoke_ms):
        while k < len(by_complete) and by_complete[k].complete_ms < op.invoke_ms:
            if best is None or by_complete[k].index > best.index:
                best = by_complete[k]
            k += 1
        yield op, best


LINEARIZABLE_READS = frozenset({ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ})


def check_reads(ops: list[Operation], log: list[LogEntry] | None = None) -> list[str]:
    """Problems of the reads and gets in ``ops`` (rules 5 to 8 above); ``log``: the agreed
    committed log (None: skip rules 6 and 7)."""
    problems: list[str] = []
    acked = [op for op in ops if op.kind in APPENDS and op.outcome == "ok"]
    reads = [op for op in ops if op.kind == "read" and op.code == Code.SUCCESS]
    last = log[-1].index if log else -1
    for r, best in _latest_acked_before(acked, reads):
        if r.mode in LINEARIZABLE_READS and best is not None and r.index < best.index:
            problems.append(f"stale read: {r} returned index {r.index}, but {best} was acknowledged before it "
                            f"was invoked")
        if log is not None and r.index > last:
            problems.append(f"{r} returned index {r.index} beyond the agreed committed log (last index {last})")
    return problems + _check_gets(acked, ops, log)


def _check_gets(acked: list[Operation], ops: list[Operation], log: list[LogEntry] | None) -> list[str]:
    """Rules 7 and 8."""
    problems: list[str] = []
    gets = [op for op in ops if op.kind == "get" and op.code in (Code.SUCCESS, Code.INDEX_OUT_OF_RANGE)]
    by_index = {e.index: e for e in log} if log is not None else {}
    last = log[-1].index if log else -1
    for g, best in _latest_acked_before(acked, gets):
        if g.code == Code.SUCCESS:
            e = by_index.get(g.index)
            if log is not None and g.index > last:
                problems.append(f"{g} returned an entry beyond the agreed committed log (last index {last})")
            elif e is not None and (e.body, e.term, e.pos) != (g.body, g.term, g.pos):
                problems.append(f"{g} returned {g.body[:16]!r} (term {g.term}, pos {g.pos}), the committed log "
                                f"holds {e.body[:16]!r} (term {e.term}, pos {e.pos})")
        elif g.mode in LINEARIZABLE_READS and best is not None and best.index >= g.index:
            problems.append(f"stale get: {g} answered INDEX_OUT_OF_RANGE, but {best} was acknowledged at index "
                            f"{best.index} before it was invoked")
    return problems
