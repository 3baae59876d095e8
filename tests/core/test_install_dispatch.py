"""InstallDispatch: the leader's installs (core.install_dispatch), without a network: when a
follower needs one, what is sent, and what its answer does to the dispatcher."""

from __future__ import annotations

import logging

import pytest

from dledger.config import DLedgerConfig
from dledger.core.follower_progress import DispatchState, FollowerProgress
from dledger.core.install_dispatch import InstallDispatch, InstallSent
from dledger.core.member_state import MemberState
from dledger.protocol import DLedgerResponseCode as Code, InstallSnapshotRequest, InstallSnapshotResponse
from dledger.store import DLedgerMemoryStore

TERM = 3
BEGIN = 9                   # the leader's log begins after entry 9 (of term 2)
NEXT_POS = 1000


def leader(begin: int = BEGIN, entries: int = 3) -> InstallDispatch:
    store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    cfg = DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3", group="g").validate()
    if begin >= 0:
        store.reset(begin, 2, NEXT_POS)
    store.persist_term(TERM, "n0")
    if entries:
        store.batch_append_as_leader([b"x"] * entries)
    return InstallDispatch(MemberState(cfg, store), store, cfg)


def installing(d: InstallDispatch) -> FollowerProgress:
    pr = FollowerProgress("n1", BEGIN, 4)          # COMPARE at the begin: it holds only its term
    assert d.needed(pr)
    pr.behind_begin()
    return pr


@pytest.mark.parametrize("state,next_index,match,needed", [
    ("COMPARE", BEGIN + 2, -1, False),             # compares at an entry the leader holds
    ("COMPARE", BEGIN + 1, -1, True),              # at the begin: only its term is known here
    ("COMPARE", 0, -1, True),
    ("TRUNCATE", BEGIN + 2, BEGIN, False),         # cuts after the begin: the leader holds the cut
    ("TRUNCATE", BEGIN + 2, BEGIN - 1, True),
])
def test_a_control_request_below_the_begin_needs_an_install(state, next_index, match, needed):
    d = leader()
    pr = FollowerProgress("n1", next_index, 4)
    if state == "TRUNCATE":
        pr.on_compare_match(match)
    assert d.needed(pr) is needed


def test_a_log_that_begins_at_0_never_needs_one():
    d = leader(begin=-1)
    assert not d.needed(FollowerProgress("n1", 0, 4))


def test_the_install_names_the_begin_its_term_and_the_next_position_one_at_a_time():
    d = leader()
    pr = installing(d)
    [send] = d.dispatch(100, pr, TERM)
    req = send.msg
    assert isinstance(req, InstallSnapshotRequest) and send.peer == "n1"
    assert (req.last_included_index, req.last_included_term, req.next_pos, req.term) == (BEGIN, 2, NEXT_POS, TERM)
    assert send.ctx == InstallSent(pr, pr.control_seq, TERM, BEGIN)
    assert pr.control_sent_ms == 100                 # the outstanding control request


def test_a_leader_with_nothing_after_its_begin_sends_nothing_and_waits():
    d = leader(entries=0)
    pr = installing(d)
    assert d.dispatch(100, pr, TERM) == []
    assert pr.retry_at == 100 + d.cfg.max_push_timeout_ms and pr.control_sent_ms == -1


def answer(code: int) -> InstallSnapshotResponse:
    return InstallSnapshotResponse(group="g", remote_id="n0", local_id="n1", code=code, leader_id="n0",
                                   term=TERM, end_index=BEGIN)


def test_success_truncates_after_the_begin():
    d = leader()
    pr = installing(d)
    [send] = d.dispatch(100, pr, TERM)
    pr.control_answered()
    d.on_answer(110, send.ctx, answer(Code.SUCCESS))
    assert (pr.state, pr.match) == (DispatchState.TRUNCATE, BEGIN)


def test_an_answer_after_the_dispatcher_moved_on_changes_nothing():
    d = leader()
    pr = installing(d)
    [send] = d.dispatch(100, pr, TERM)
    pr.start_recovery(d.store.ledger_end_index)     # back to COMPARE meanwhile
    d.on_answer(110, send.ctx, answer(Code.SUCCESS))
    assert (pr.state, pr.match) == (DispatchState.COMPARE, -1)


@pytest.mark.parametrize("code,delay", [
    (Code.INCONSISTENT_STATE, "heartbeat"),
    (Code.NOT_FOLLOWER, "soon"),
    (Code.INSTALL_SNAPSHOT_ERROR, "push timeout"),   # a follower with a state machine: no snapshots yet
])
def test_a_refusal_compares_again_from_the_end_after_a_delay(code, delay):
    d = leader()
    pr = installing(d)
    [send] = d.dispatch(100, pr, TERM)
    pr.control_answered()
    d.on_answer(110, send.ctx, answer(code))
    cfg = d.cfg
    expected = {"heartbeat": cfg.heart_beat_time_interval_ms, "soon": max(1, cfg.heart_beat_time_interval_ms // 10),
                "push timeout": max(cfg.heart_beat_time_interval_ms, cfg.max_push_timeout_ms)}[delay]
    assert (pr.state, pr.next, pr.retry_at) == (DispatchState.COMPARE, d.store.ledger_end_index + 1, 110 + expected)


def test_a_run_of_the_same_refusal_is_logged_once(caplog):
    d = leader()
    pr = FollowerProgress("n1", BEGIN, 4)
    caplog.set_level(logging.WARNING, logger="dledger.core.entry_pusher")
    for code in [Code.INSTALL_SNAPSHOT_ERROR, Code.INSTALL_SNAPSHOT_ERROR, Code.INCONSISTENT_STATE,
                 Code.SUCCESS, Code.INCONSISTENT_STATE]:
        pr.behind_begin()
        [send] = d.dispatch(100, pr, TERM)
        pr.control_answered()
        d.on_answer(110, send.ctx, answer(code))
        if code == Code.SUCCESS:
            pr.truncate_refused(d.store.ledger_end_index)   # back to COMPARE for the next round
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert [m.rsplit(": ", 1)[1] for m in refused] == ["INSTALL_SNAPSHOT_ERROR", "INCONSISTENT_STATE",
                                                       "INCONSISTENT_STATE"]
