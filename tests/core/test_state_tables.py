"""The state tables are the code's own: the role and dispatcher transitions are enforced by
``MemberState`` and ``FollowerProgress`` (an illegal transition raises, every legal one is
accepted), and the state diagrams in docs/architecture.md are drawn from the same tables
(this test regenerates them and fails when the docs fall behind)."""

import itertools
import pathlib

import pytest

from dledger.config import DLedgerConfig
from dledger.core.follower_progress import TRANSITIONS, DispatchState, FollowerProgress
from dledger.core.member_state import ROLE_TRANSITIONS, MemberState, Role
from dledger.core.transitions import IllegalTransition
from dledger.store import DLedgerMemoryStore

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def role_diagram() -> str:
    lines = ["stateDiagram-v2", "    [*] --> CANDIDATE: start"]
    lines += [f"    {a.value} --> {b.value}: {why}" for a, b, why in ROLE_TRANSITIONS]
    return "\n".join(lines)


def dispatcher_diagram() -> str:
    lines = ["stateDiagram-v2", "    [*] --> COMPARE: becomes leader"]
    lines += [f"    {a.value} --> {b.value}: {why}" for a, b, why in TRANSITIONS]
    return "\n".join(lines)


def test_docs_carry_the_generated_diagrams():
    text = DOC.read_text()
    assert role_diagram() in text, "regenerate the role diagram:\n" + role_diagram()
    assert dispatcher_diagram() in text, "regenerate the dispatcher diagram:\n" + dispatcher_diagram()


# -- roles ------------------------------------------------------------------------------------
ROLES = (Role.CANDIDATE, Role.FOLLOWER, Role.LEADER)


def member_in(role: Role) -> MemberState:
    """n0 of a 3-node group in ``role`` (reached along legal transitions), term 1."""
    store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    store.persist_term(1, None)
    member = MemberState(DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3").validate(), store)
    member.tell_initial_role()
    if role is Role.LEADER:
        member.change_to_leader(1)
    elif role is Role.FOLLOWER:
        member.change_to_follower(1, "n1")
    assert member.role is role
    return member


def enter(member: MemberState, role: Role) -> None:
    """Ask for ``role`` as the elector would: a leader of a new term (voted for itself), the
    follower of a leader it does not follow yet, a candidate of the next term."""
    term = member.curr_term
    if role is Role.LEADER:
        member.store.persist_term(term + 1, member.self_id)
        member.change_to_leader(term + 1)
    elif role is Role.FOLLOWER:
        member.change_to_follower(term, "n2")          # a leader it does not follow yet
    else:
        member.change_to_candidate(term + 1)


@pytest.mark.parametrize("a,b", [(a, b) for a, b, _why in ROLE_TRANSITIONS])
def test_every_legal_role_transition_is_accepted(a, b):
    member = member_in(a)
    enter(member, b)
    assert member.role is b and member.changes[-1].role is b


@pytest.mark.parametrize("a,b", [(a, b) for a, b in itertools.product(ROLES, ROLES)
                                 if not ROLE_TRANSITIONS.allows(a, b)])
def test_every_illegal_role_transition_raises_and_changes_nothing(a, b):
    member = member_in(a)
    told = list(member.changes)
    with pytest.raises(IllegalTransition):
        enter(member, b)
    assert member.role is a and member.changes == told


def test_reentering_the_role_and_term_held_is_no_transition():
    leader = member_in(Role.LEADER)
    leader.change_to_leader(1)
    follower = member_in(Role.FOLLOWER)
    follower.change_to_follower(1, "n1")
    assert [c.role for c in leader.changes].count(Role.LEADER) == 1
    assert [c.role for c in follower.changes].count(Role.FOLLOWER) == 1


def test_the_harness_may_force_any_role():
    member = member_in(Role.LEADER)
    member.change_to_follower(1, "n1", forced=True)
    assert member.role is Role.FOLLOWER
    member.change_to_leader(1, forced=True)
    assert member.role is Role.LEADER


# -- dispatchers ------------------------------------------------------------------------------
REACHABLE = (DispatchState.COMPARE, DispatchState.TRUNCATE, DispatchState.APPEND)


def progress_in(state: DispatchState) -> FollowerProgress:
    pr = FollowerProgress("n1", 10, 4)
    if state is not DispatchState.COMPARE:
        pr.on_compare_match(5)
    if state is DispatchState.APPEND:
        pr.become_append()
    assert pr.state is state
    return pr


def move(pr: FollowerProgress, state: DispatchState) -> None:
    if state is DispatchState.COMPARE:
        pr.become_compare(3)
    elif state is DispatchState.TRUNCATE:
        pr.become_truncate()
    else:
        pr.become_append()


@pytest.mark.parametrize("a,b", [(a, b) for a, b, _why in TRANSITIONS])
def test_every_legal_dispatcher_transition_is_accepted(a, b):
    pr = progress_in(a)
    pr.inflights.add(6, 2, 0)
    seq = pr.control_seq
    move(pr, b)
    assert pr.state is b
    assert not pr.inflights and pr.control_sent_ms == -1 and pr.control_seq > seq


@pytest.mark.parametrize("a,b", [(a, b) for a, b in itertools.product(REACHABLE, REACHABLE)
                                 if not TRANSITIONS.allows(a, b)])
def test_every_illegal_dispatcher_transition_raises_and_changes_nothing(a, b):
    pr = progress_in(a)
    before = (pr.state, pr.next, pr.match, pr.control_seq)
    with pytest.raises(IllegalTransition):
        move(pr, b)
    assert (pr.state, pr.next, pr.match, pr.control_seq) == before


@pytest.mark.parametrize("a,b", list(itertools.product(DispatchState, DispatchState)))
def test_the_dispatcher_table_is_checked_for_every_pair(a, b):
    if TRANSITIONS.allows(a, b):
        TRANSITIONS.check(a, b)
    else:
        with pytest.raises(IllegalTransition):
            TRANSITIONS.check(a, b)
    # COMMIT and INSTALL_SNAPSHOT are never entered nor left
    if {a, b} & {DispatchState.COMMIT, DispatchState.INSTALL_SNAPSHOT}:
        assert not TRANSITIONS.allows(a, b)
