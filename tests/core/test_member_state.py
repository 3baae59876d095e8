import pytest

from dledger.config import DLedgerConfig
from dledger.core.member_state import MemberState, Role
from dledger.errors import DLedgerError
from dledger.store import DLedgerMmapFileStore


@pytest.fixture
def ms(tmp_path):
    cfg = DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3").validate()
    store = DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=1 << 16, index_file_size=32 * 64)
    yield MemberState(cfg, store)
    store.close()


def test_starts_as_candidate_with_the_persisted_term(ms):
    assert ms.role is Role.CANDIDATE and ms.curr_term == 0 and ms.leader_id is None
    assert ms.remote_peer_ids == ["n1", "n2"]


def test_next_term_is_durable_and_clears_the_vote(ms, tmp_path):
    ms.set_vote_for("n1")
    assert ms.next_term() == 1
    reopened = DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=1 << 16, index_file_size=32 * 64,
                                          read_only=True)
    assert (reopened.current_term, reopened.vote_for) == (1, None)
    reopened.close()


def test_next_term_jumps_to_the_known_max_term(ms):
    ms.change_to_candidate(7)
    assert ms.next_term() == 7


def test_next_term_only_as_candidate(ms):
    ms.change_to_leader(0)
    with pytest.raises(DLedgerError) as exc:
        ms.next_term()
    assert exc.value.code == 504


def test_role_changes_are_recorded_once_each(ms):
    ms.change_to_candidate(0)
    ms.change_to_candidate(0)     # same (term, role): not told again
    ms.change_to_leader(0)
    ms.change_to_leader(0)
    assert [(c.term, c.role) for c in ms.changes] == [(0, Role.CANDIDATE), (0, Role.LEADER)]


def test_commit_index_only_moves_forward_and_by_role(ms):
    assert not ms.leader_update_committed_index(0, 3)     # not leader
    ms.store.batch_append_as_leader([b"a", b"b", b"c"])
    ms.change_to_leader(0)
    assert ms.leader_update_committed_index(0, 1)
    assert not ms.leader_update_committed_index(0, 0)
    assert ms.store.committed_index == 1
    assert not ms.follower_update_committed_index(2)      # leader ignores follower updates


def test_quorum_of_three(ms):
    assert not ms.majority.is_quorum(1) and ms.majority.is_quorum(2)
