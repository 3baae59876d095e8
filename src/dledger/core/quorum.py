"""Quorums: the one home of majority arithmetic (table-tested in tests/core/test_quorum.py).

``Majority`` is a majority configuration over the voters' ids, as etcd's ``MajorityConfig``:
the vote tallies, the commit rule, heartbeat rounds, check-quorum and the read lease all ask
it, so quorum size is computed in exactly one place. Below it, the same math as pure
functions over plain numbers, which the table tests drive directly.

Rules:
- a quorum of ``n`` members is ``n // 2 + 1`` (1 -> 1, 2 -> 2, 3 -> 2, 4 -> 3, 5 -> 3), as
  DLedger's ``MemberState.isQuorum``;
- the index a quorum holds is the ``n//2``-th largest water mark (0-based); a voter that has
  acknowledged nothing counts as ``-1``;
- the leader may commit index ``i`` only when a quorum holds ``i`` (each member's water mark
  is the highest index it holds *verified against this leader*), only when ``i`` carries the
  current term (entries of older terms commit only through a later current-term entry, as
  the Raft paper's Figure 8 shows), and the commit index never goes backwards;
- a vote is WON once a quorum said yes, LOST once a quorum can no longer say yes even if
  every voter still missing did, and PENDING otherwise; a unanimous vote (protocol-aware
  recovery) is WON only when every voter said yes, and LOST once every voter answered;
- a set of voters meets every quorum when it has ``n - q + 1`` of them (``meets_every_quorum``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum


class VoteOutcome(Enum):
    """The state of a vote over a ``Majority`` (etcd's ``quorum.VoteResult``; named apart
    from the wire's ``protocol.VoteResult``, which is one voter's answer)."""

    PENDING = "PENDING"
    LOST = "LOST"
    WON = "WON"


def quorum_size(members: int) -> int:
    if members < 1:
        raise ValueError(f"a group needs at least one member, got {members}")
    return members // 2 + 1


def is_quorum(count: int, members: int) -> bool:
    return count >= quorum_size(members)


def quorum_index(water_marks: Iterable[int]) -> int:
    """The highest index held by a quorum: the ``n//2``-th largest water mark (0-based)."""
    marks = sorted(water_marks, reverse=True)
    if not marks:
        raise ValueError("no water marks")
    return marks[len(marks) // 2]


def next_commit_index(water_marks: Iterable[int], committed: int, current_term: int,
                      term_of: Callable[[int], int]) -> int:
    """The commit index after applying the quorum-ack rule; never below ``committed``.

    ``term_of(i)`` gives the term of the leader's entry ``i``.
    """
    candidate = quorum_index(water_marks)
    if candidate <= committed:
        return committed
    if term_of(candidate) != current_term:
        return committed
    return candidate


def vote_outcome(yes: int, no: int, members: int) -> VoteOutcome:
    """WON, LOST or PENDING for ``yes`` and ``no`` answers out of ``members`` voters."""
    need = quorum_size(members)
    if yes >= need:
        return VoteOutcome.WON
    if yes + (members - yes - no) < need:
        return VoteOutcome.LOST
    return VoteOutcome.PENDING


class Majority:
    """A majority configuration: the voters' ids and the quorum they need."""

    __slots__ = ("voters", "size")

    def __init__(self, voters: Iterable[str]) -> None:
        self.voters: tuple[str, ...] = tuple(voters)
        #: how many voters make a quorum (a node that knows no configuration yet has no voters:
        #: no count of them is a quorum)
        self.size = quorum_size(len(self.voters)) if self.voters else 1

    def __len__(self) -> int:
        return len(self.voters)

    def __repr__(self) -> str:
        return f"Majority({list(self.voters)}, quorum={self.size})"

    def is_quorum(self, count: int) -> bool:
        return count >= self.size and bool(self.voters)

    def meets_every_quorum(self, ids: Iterable[str]) -> bool:
        """Does every quorum of these voters contain one of ``ids`` (``n - q + 1`` voters)?"""
        return len(set(ids).intersection(self.voters)) >= len(self.voters) - self.size + 1

    def committed_index(self, acked: Mapping[str, int]) -> int:
        """The highest value a quorum has reached: with log indexes, the index a quorum holds;
        with times, the latest time by which a quorum had been heard. Missing voters count
        as ``-1``."""
        get = acked.get
        return quorum_index([get(v, -1) for v in self.voters]) if self.voters else -1

    def next_commit_index(self, acked: Mapping[str, int], committed: int, current_term: int,
                          term_of: Callable[[int], int]) -> int:
        """The commit rule (``next_commit_index``) over the voters' water marks in ``acked``."""
        if not self.voters:
            return committed
        get = acked.get
        return next_commit_index([get(v, -1) for v in self.voters], committed, current_term, term_of)

    def unanimous_result(self, votes: Mapping[str, bool | None]) -> VoteOutcome:
        """A round that needs every voter's yes: WON when all said yes, LOST when all answered
        and one said no (the round waits for every answer: they tell the candidate which term
        to try next), PENDING otherwise."""
        yes, no = self._tally(votes)
        if not self.voters:
            return VoteOutcome.LOST
        if yes == len(self.voters):
            return VoteOutcome.WON
        return VoteOutcome.LOST if yes + no == len(self.voters) else VoteOutcome.PENDING

    def vote_result(self, votes: Mapping[str, bool | None]) -> VoteOutcome:
        """``votes`` maps a voter to yes (True), no (False) or not yet (None or missing)."""
        if not self.voters:
            return VoteOutcome.LOST
        yes, no = self._tally(votes)
        return vote_outcome(yes, no, len(self.voters))

    def _tally(self, votes: Mapping[str, bool | None]) -> tuple[int, int]:
        """How many voters said yes and how many said no (others have not answered)."""
        answers = [votes.get(v) for v in self.voters]
        return answers.count(True), answers.count(False)
