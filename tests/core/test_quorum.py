import pytest

from dledger.core.quorum import is_quorum, next_commit_index, quorum_index, quorum_size


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
