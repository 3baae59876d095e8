import pytest

from dledger.config import DLedgerConfig
from dledger.core.member_state import MemberState, Role, RoleChange, RoleEvent
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
    ms.on_event(RoleEvent.HIGHER_TERM_SEEN, 7)
    assert ms.next_term() == 7


def test_next_term_only_as_candidate(ms):
    ms.on_event(RoleEvent.WON_VOTE, 0)
    with pytest.raises(DLedgerError) as exc:
        ms.next_term()
    assert exc.value.code == 504


def test_role_changes_are_recorded_once_each_with_the_event_that_caused_them(ms):
    ms.tell_initial_role()
    ms.on_event(RoleEvent.HIGHER_TERM_SEEN, 0)     # same (term, role): not told again
    ms.on_event(RoleEvent.WON_VOTE, 0)
    ms.on_event(RoleEvent.FORCED_LEADER, 0)        # same (term, role): not told again
    ms.store.persist_term(1, None)
    ms.on_event(RoleEvent.FORCED_FOLLOWER, 1, "n2")
    assert ms.changes == [RoleChange(0, Role.CANDIDATE, None, RoleEvent.START),
                          RoleChange(0, Role.LEADER, "n0", RoleEvent.WON_VOTE),
                          RoleChange(1, Role.FOLLOWER, "n2", RoleEvent.FORCED_FOLLOWER)]


def test_a_role_change_says_why_in_its_log_line(ms, caplog):
    caplog.set_level("INFO", logger="dledger.core.member_state")
    ms.tell_initial_role()
    ms.on_event(RoleEvent.HIGHER_TERM_SEEN, 3)
    ms.on_event(RoleEvent.LEADER_HEARD, 3, "n1")
    assert [r.getMessage() for r in caplog.records] == [
        "n0: CANDIDATE in term 0 (start)",
        "n0: CANDIDATE -> CANDIDATE in term 3 (higher term seen)",
        "n0: CANDIDATE -> FOLLOWER in term 3 leader=n1 (leader heard)"]


def test_a_role_change_built_by_a_host_needs_no_event():
    change = RoleChange(4, Role.LEADER, "n0")
    assert change.event is None and str(change) == "LEADER in term 4"


def test_commit_index_only_moves_forward_and_by_role(ms):
    assert not ms.leader_update_committed_index(0, 3)     # not leader
    ms.store.batch_append_as_leader([b"a", b"b", b"c"])
    ms.on_event(RoleEvent.WON_VOTE, 0)
    assert ms.leader_update_committed_index(0, 1)
    assert not ms.leader_update_committed_index(0, 0)
    assert ms.store.committed_index == 1
    assert not ms.follower_update_committed_index(2)      # leader ignores follower updates


def test_quorum_of_three(ms):
    assert not ms.majority.is_quorum(1) and ms.majority.is_quorum(2)
