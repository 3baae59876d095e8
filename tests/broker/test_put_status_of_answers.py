"""The put status of each answer the leader can give an append agrees with the resend rule of
the DLedger client: an answer given before the leader took the append becomes a status the
broker's client sends again (nothing was written); an answer after which the append may still
commit becomes a status it reports as unclear and never sends again. EXPIRED_TERM (the term
moved on while the message waited for a quorum) was SERVICE_NOT_AVAILABLE, so a message that
then committed could be sent again and stored twice."""

from types import SimpleNamespace

import pytest

from dledger.broker.client import RETRY_STATUSES, UNCLEAR_STATUSES
from dledger.broker.commit_log import DLedgerCommitLog
from dledger.client.aio import NOT_TAKEN, UNCLEAR
from dledger.protocol import DLedgerResponseCode as Code


def status_of(code: int) -> str:
    """The status ``DLedgerCommitLog`` gives a put whose append was answered ``code``."""
    commit_log = SimpleNamespace(_stamped={})
    return DLedgerCommitLog._result(commit_log, SimpleNamespace(code=code, leader_id=None), 0, 1).status.value


@pytest.mark.parametrize("code", NOT_TAKEN)
def test_an_answer_given_before_the_append_was_taken_is_a_status_sent_again(code):
    assert status_of(code) in RETRY_STATUSES


@pytest.mark.parametrize("code", UNCLEAR)
def test_an_answer_after_which_the_append_may_commit_is_an_unclear_status(code):
    assert status_of(code) in UNCLEAR_STATUSES


def test_expired_term_is_flush_slave_timeout_and_an_unknown_code_unknown_error():
    assert status_of(Code.EXPIRED_TERM) == "FLUSH_SLAVE_TIMEOUT"
    assert status_of(999) == "UNKNOWN_ERROR" and "UNKNOWN_ERROR" in UNCLEAR_STATUSES
