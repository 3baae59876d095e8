"""Quorum arithmetic as pure functions (table-tested in tests/core/test_quorum.py).

Rules:
- a quorum of ``n`` members is ``n // 2 + 1`` (1 -> 1, 2 -> 2, 3 -> 2, 4 -> 3, 5 -> 3), as
  DLedger's ``MemberState.isQuorum``;
- the leader may commit index ``i`` only when a quorum holds ``i`` (each member's water mark
  is the highest index it holds *verified against this leader*), only when ``i`` carries the
  current term (entries of older terms commit only through a later current-term entry,
  Raft §5.4.2), and the commit index never goes backwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


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
