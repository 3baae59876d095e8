"""Invariant checkers of the simulator (the invariants are listed in docs/simulation.md).

Watched on every step (``InvariantChecker.observe`` sees every ``Ready`` of every node):
- I1 election safety: at most one node becomes leader in any term;
- I6 commit index monotonic within a process lifetime, and never beyond the log end;
- applied once, in order: the recording state machine sees strictly increasing indices
  within a process lifetime, each equal to the committed entry (checked at the end).
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
