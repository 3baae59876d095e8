"""Invariant checkers of the simulator (the invariants are listed in docs/simulation.md).

Watched on every step (``InvariantChecker.observe`` sees every ``Ready`` of every node):
- I1 election safety: at most one node becomes leader in any term;
- I6 commit index monotonic within a process lifetime, and never beyond the log end;
- applied once, in order: the recording state machine sees strictly increasing indices
  within a process lifetime, each equal to the committed entry (checked at the end);
- I4 storage identity, during the run (``StorageIdentity``): whenever a replica's committed
  index moves past what was checked of it, the newly committed entries in its store are compared
  byte for byte with what the first replica to commit each index held there, so a divergence is
  reported at the step that made it (before any flush or checkpoint of it), not at the end.
Checked over the stores at the end (``check_logs``):
- I2 log matching: two logs holding an entry with the same index and term hold the same
  bytes there, and the same bytes at every index before it (so the same ``pos`` too);
- I4 committed-prefix agreement: replicas' committed prefixes are byte-identical.
Elsewhere: the client history (``history.check_commit_log``, ``history.check_reads``), the
per-key linearizability of the key-value machine (``kv``, ``linearizability``); not checked
here: storage-level damage (the store's own ``verify``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dledger.core import Role
from dledger.entry import decode_header


class InvariantViolation(AssertionError):
    pass


@dataclass
class InvariantChecker:
    leaders_by_term: dict[int, str] = field(default_factory=dict)
    last_commit: dict[tuple[str, int], int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def observe(self, node_id: str, incarnation: int, now_ms: int, ready, ledger_end: int) -> None:
        for change in ready.role_changes:
            if change.role is Role.LEADER:
                other = self.leaders_by_term.setdefault(change.term, node_id)
                if other != node_id:
                    self.problems.append(f"I1 at {now_ms}ms: {node_id} and {other} both leaders of term {change.term}")
        key = (node_id, incarnation)
        before = self.last_commit.get(key, -1)
        if ready.committed_index < before:
            self.problems.append(f"I6 at {now_ms}ms: {node_id} commit index went back {before} -> "
                                 f"{ready.committed_index}")
        if ready.committed_index > ledger_end:
            self.problems.append(f"I6 at {now_ms}ms: {node_id} committed {ready.committed_index} beyond its end {ledger_end}")
        self.last_commit[key] = max(before, ready.committed_index)


@dataclass
class StorageIdentity:
    """Every replica's committed entries are the same bytes (I4), checked as they commit.

    ``agreed`` holds, per index, the raw record the first replica to commit it held there (the
    record includes the ``pos``, so the same bytes also mean the same place in the data file);
    each (node, incarnation) has a cursor: a restarted process is checked again from its log's
    start, so entries a power cut took and a leader sent again are compared too. An entry the
    store refuses to read (damaged, waiting for repair) stops the cursor there until a later
    step reads it."""

    problems: list[str]
    agreed: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    checked: dict[tuple[str, int], int] = field(default_factory=dict)

    def observe(self, node_id: str, incarnation: int, now_ms: int, committed: int, store) -> None:
        key = (node_id, incarnation)
        start = max(self.checked.get(key, -1), store.ledger_before_begin_index) + 1
        if committed < start:
            return
        agreed = self.agreed
        upto = start - 1
        for i in range(start, committed + 1):
            raw = _raw(store, i)
            if raw is None:
                break
            seen = agreed.get(i)
            if seen is None:
                agreed[i] = (raw, node_id)
            elif seen[0] != raw:
                self.problems.append(f"I4 at {now_ms}ms: {node_id} committed index {i} with other bytes than "
                                     f"{seen[1]} committed there ({_describe(raw)} vs {_describe(seen[0])})")
                self.checked[key] = committed           # one report per divergence
                return
            upto = i
        self.checked[key] = upto


def _describe(raw: bytes) -> str:
    try:
        h = decode_header(raw)
        return f"term {h.term}, pos {h.pos}, {len(raw)} bytes"
    except Exception:
        return f"{len(raw)} undecodable bytes"


class RecordingStateMachine:
    """Records what it applies; flags any index applied twice or out of order."""

    def __init__(self, node_id: str, problems: list[str]) -> None:
        self.node_id = node_id
        self.problems = problems
        self.applied: list[tuple[int, bytes]] = []
        self.last = -1

    def on_apply(self, entries) -> None:
        for a in entries:
            if a.index <= self.last:
                self.problems.append(f"{self.node_id} applied index {a.index} after {self.last}")
            self.last = a.index
            self.applied.append((a.index, a.entry.body))
            a.resp = a.index

    def on_shutdown(self) -> None:
        pass


def _raw(store, i: int) -> bytes | None:
    try:
        return bytes(store.get_raw(i))
    except Exception:
        return None


def check_logs(stores: dict[str, object], committed: dict[str, int]) -> list[str]:
    """I2 and I4 over the given stores (``committed``: each store's committed index)."""
    problems: list[str] = []
    ids = sorted(stores)
    for a_i, a in enumerate(ids):
        for b in ids[a_i + 1:]:
            sa, sb = stores[a], stores[b]
            lo = max(sa.ledger_before_begin_index, sb.ledger_before_begin_index) + 1
            hi = min(sa.ledger_end_index, sb.ledger_end_index)
            common = min(committed[a], committed[b])
            # the highest index where both hold the same term: everything up to it must match
            match_to = -1
            for i in range(hi, lo - 1, -1):
                try:
                    if sa.get_entry_term(i) == sb.get_entry_term(i):
                        match_to = i
                        break
                except Exception:
                    continue
            upto = max(match_to, common)
            for i in range(lo, upto + 1):
                ra, rb = _raw(sa, i), _raw(sb, i)
                if ra is None or rb is None or ra != rb:
                    what = "I4 committed prefixes differ" if i <= common else "I2 log matching broken"
                    problems.append(f"{what} at index {i} between {a} and {b}")
                    break
    return problems
