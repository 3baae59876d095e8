import pytest

from dledger.core.quorum import Majority, is_quorum, next_commit_index, quorum_index, quorum_size


@pytest.mark.parametrize("members,size", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_quorum_size_is_dledgers_is_quorum(members, size):
    assert quorum_size(members) == size
    assert is_quorum(size, members) and not is_quorum(size - 1, members)


@pytest.mark.parametrize("marks,expected", [
    ([5], 5),
    ([5, 3], 3),              # 2 nodes: both must hold it
    ([5, 3, 1], 3),           # 3 nodes: second highest
    ([1, 3, 5], 3),           # order does not matter
    ([9, 9, -1], 9),
    ([7, -1, -1], -1),
    ([10, 8, 6, 4, 2], 6),    # 5 nodes: third highest
    ([10, 10, 10, -1, -1], 10),
])
def test_quorum_index_is_the_index_a_majority_holds(marks, expected):
    assert quorum_index(marks) == expected


TERMS = {0: 1, 1: 1, 2: 2, 3: 3, 4: 3, 5: 3}


@pytest.mark.parametrize("marks,committed,term,expected,why", [
    ([5, 4, 3], -1, 3, 4, "current-term entry held by a quorum commits"),
    ([5, 4, 3], 4, 3, 4, "nothing new"),
    ([5, 2, 2], -1, 3, -1, "old-term entry alone never commits (Figure 8)"),
    ([5, 2, 1], 1, 3, 1, "old-term quorum index keeps the old commit"),
    ([5, 3, 3], 1, 3, 3, "a current-term entry commits the older ones with it"),
    ([5, 2, 2], 4, 3, 4, "commit never goes backwards"),
    ([1, 1, 0], -1, 1, 1, "term 1 leader commits its own entries"),
    ([2, 2, 2], -1, 3, -1, "term-2 entry under a term-3 leader waits"),
])
def test_next_commit_index_table(marks, committed, term, expected, why):
    assert next_commit_index(marks, committed, term, TERMS.__getitem__) == expected, why


def test_empty_marks_and_zero_members_are_errors():
    with pytest.raises(ValueError):
        quorum_index([])
    with pytest.raises(ValueError):
        quorum_size(0)


from hypothesis import given, strategies as st  # noqa: E402


@given(marks=st.lists(st.integers(-1, 50), min_size=1, max_size=7), committed=st.integers(-1, 50),
       terms=st.lists(st.integers(0, 5), min_size=51, max_size=51), current=st.integers(0, 5))
def test_commit_rule_properties(marks, committed, terms, current):
    terms = sorted(terms)                       # terms never decrease along a log
    new = next_commit_index(marks, committed, current, terms.__getitem__)
    assert new >= committed                                  # never backwards
    if new > committed:
        held = sum(m >= new for m in marks)
        assert is_quorum(held, len(marks))                   # a quorum holds it
        assert terms[new] == current                         # through a current-term entry


# -- Majority: the same math over voter ids --------------------------------------------------
from dledger.core.quorum import Majority, VoteOutcome, vote_outcome  # noqa: E402

V3 = Majority(["n0", "n1", "n2"])
V5 = Majority(["n0", "n1", "n2", "n3", "n4"])


@pytest.mark.parametrize("majority,acked,expected", [
    (V3, {}, -1),                                    # nobody acknowledged anything
    (V3, {"n0": 5}, -1),                             # the leader alone is no quorum
    (V3, {"n0": 5, "n1": 3}, 3),
    (V3, {"n0": 5, "n1": 3, "n2": 4}, 4),
    (V3, {"n0": 5, "n1": 9, "n7": 100}, 5),           # a non-voter counts for nothing
    (V5, {"n0": 10, "n1": 8, "n2": 6, "n3": 4, "n4": 2}, 6),
    (V5, {"n0": 10, "n1": 10}, -1),
])
def test_majority_committed_index(majority, acked, expected):
    assert majority.committed_index(acked) == expected


@pytest.mark.parametrize("majority,votes,expected", [
    (V3, {}, VoteOutcome.PENDING),
    (V3, {"n0": True}, VoteOutcome.PENDING),
    (V3, {"n0": True, "n1": True}, VoteOutcome.WON),
    (V3, {"n0": True, "n1": False}, VoteOutcome.PENDING),
    (V3, {"n0": True, "n1": False, "n2": False}, VoteOutcome.LOST),
    (V3, {"n0": False, "n1": False}, VoteOutcome.LOST),          # decided before n2 answers
    (V3, {"n0": True, "n1": None, "n2": None}, VoteOutcome.PENDING),
    (V3, {"n0": True, "n7": True}, VoteOutcome.PENDING),        # a non-voter's yes does not count
    (V5, {"n0": True, "n1": True, "n2": True}, VoteOutcome.WON),
    (V5, {"n0": False, "n1": False, "n2": False}, VoteOutcome.LOST),
    (V5, {"n0": True, "n1": True, "n2": False, "n3": False}, VoteOutcome.PENDING),
    (Majority(["n0"]), {"n0": True}, VoteOutcome.WON),
    (Majority(["n0", "n1"]), {"n0": True, "n1": False}, VoteOutcome.LOST),
])
def test_majority_vote_result(majority, votes, expected):
    assert majority.vote_result(votes) is expected


def test_majority_is_quorum_and_size_match_the_pure_functions():
    for n in range(1, 8):
        m = Majority([f"n{i}" for i in range(n)])
        assert m.size == quorum_size(n) and len(m) == n
        assert all(m.is_quorum(c) == is_quorum(c, n) for c in range(n + 1))


@given(yes=st.integers(0, 7), no=st.integers(0, 7), members=st.integers(1, 7))
def test_vote_outcome_is_won_lost_or_pending_as_a_quorum_can_still_form(yes, no, members):
    if yes + no > members:
        return
    outcome = vote_outcome(yes, no, members)
    missing = members - yes - no
    assert (outcome is VoteOutcome.WON) == is_quorum(yes, members)
    assert (outcome is VoteOutcome.LOST) == (not is_quorum(yes + missing, members))


@given(marks=st.lists(st.integers(-1, 50), min_size=1, max_size=7), committed=st.integers(-1, 50),
       terms=st.lists(st.integers(0, 5), min_size=51, max_size=51), current=st.integers(0, 5))
def test_majority_commit_rule_is_the_pure_rule(marks, committed, terms, current):
    terms = sorted(terms)
    m = Majority([f"n{i}" for i in range(len(marks))])
    acked = {f"n{i}": mark for i, mark in enumerate(marks)}
    assert m.next_commit_index(acked, committed, current, terms.__getitem__) == \
        next_commit_index(marks, committed, current, terms.__getitem__)


@pytest.mark.parametrize("voters,ids,meets", [
    (["a"], [], False),
    (["a"], ["a"], True),
    (["a", "b"], ["b"], True),                  # 2 voters: the quorum is both
    (["a", "b", "c"], ["b"], False),
    (["a", "b", "c"], ["b", "c"], True),
    (["a", "b", "c", "d", "e"], ["b", "c"], False),
    (["a", "b", "c", "d", "e"], ["b", "c", "d"], True),
    (["a", "b", "c"], ["b", "c", "x"], True),   # a non-voter counts for nothing
    (["a", "b", "c"], ["b", "x"], False),
])
def test_a_set_of_voters_meets_every_quorum_with_n_minus_q_plus_one_of_them(voters, ids, meets):
    assert Majority(voters).meets_every_quorum(ids) is meets
