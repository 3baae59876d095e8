"""The state tables are the code's own: roles and dispatcher states change by event, and the
tables ``ROLE_TRANSITIONS`` and ``TRANSITIONS`` map (state, event) to the new state (a pair
they do not hold raises, every pair they hold takes the code to the state they name); the
state diagrams in docs/architecture.md are drawn from the same tables, each edge labelled with
its events (this test regenerates them and fails when the docs fall behind)."""

import itertools
import pathlib

import pytest

from dledger.config import DLedgerConfig
from dledger.core.follower_progress import TRANSITIONS, DispatchEvent, DispatchState, FollowerProgress
from dledger.core.member_state import ROLE_TRANSITIONS, MemberState, Role, RoleChange, RoleEvent
from dledger.core.transitions import IllegalTransition, TransitionTable
from dledger.store import DLedgerMemoryStore

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def diagram(table: TransitionTable, start: str) -> str:
    lines = ["stateDiagram-v2", f"    [*] --> {start}"]
    lines += [f"    {a.value} --> {b.value}: {', '.join(e.name for e in events)}"
              for a, b, events in table.grouped()]
    return "\n".join(lines)


def role_diagram() -> str:
    return diagram(ROLE_TRANSITIONS, "CANDIDATE: START")


def dispatcher_diagram() -> str:
    return diagram(TRANSITIONS, "COMPARE: becomes leader")


def test_docs_carry_the_generated_diagrams():
    text = DOC.read_text()
    assert role_diagram() in text, "regenerate the role diagram:\n" + role_diagram()
    assert dispatcher_diagram() in text, "regenerate the dispatcher diagram:\n" + dispatcher_diagram()


def test_docs_name_every_event():
    text = DOC.read_text()
    missing = [e.name for e in (*RoleEvent, *DispatchEvent) if f"`{e.name}`" not in text]
    assert not missing, f"docs/architecture.md does not explain {missing}"


def test_a_table_refuses_an_event_it_has_no_edge_for_naming_state_and_event():
    with pytest.raises(IllegalTransition, match="n0: role FOLLOWER has no transition on WON_VOTE"):
        ROLE_TRANSITIONS.next_state(Role.FOLLOWER, RoleEvent.WON_VOTE, "n0")


# -- roles ------------------------------------------------------------------------------------
ROLES = (Role.CANDIDATE, Role.FOLLOWER, Role.LEADER)
#: the events that happen in a role (START is the first role told, no transition)
ROLE_EVENTS = [e for e in RoleEvent if e is not RoleEvent.START]


def member_in(role: Role) -> MemberState:
    """n0 of a 3-node group in ``role`` (reached along legal transitions), term 1."""
    store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    store.persist_term(1, None)
    member = MemberState(DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3").validate(), store)
    member.tell_initial_role()
    if role is Role.LEADER:
        member.on_event(RoleEvent.WON_VOTE, 1)
    elif role is Role.FOLLOWER:
        member.on_event(RoleEvent.LEADER_HEARD, 1, "n1")
    assert member.role is role
    return member


def fire(member: MemberState, event: RoleEvent) -> tuple[int, str | None]:
    """``event`` as the elector sends it: a passed vote or a forced leadership in the current
    term, a leader (one it does not follow yet) heard or forced in the current term, anything
    else with the next term. Returns the (term, leader) given."""
    term, leader = member.curr_term, None
    if event in (RoleEvent.LEADER_HEARD, RoleEvent.FORCED_FOLLOWER):
        leader = "n2"
    elif event not in (RoleEvent.WON_VOTE, RoleEvent.FORCED_LEADER):
        term += 1
    member.on_event(event, term, leader)
    return term, leader


@pytest.mark.parametrize("a,event,b", list(ROLE_TRANSITIONS))
def test_every_role_transition_of_the_table_takes_the_role_it_names_and_says_why(a, event, b):
    member = member_in(a)
    term, leader = fire(member, event)
    assert member.role is b and member.curr_term == term
    if (term, b) != (1, a):          # a change of term or role is told, with its event
        assert member.changes[-1] == RoleChange(term, b, "n0" if b is Role.LEADER else leader, event)


@pytest.mark.parametrize("a,event", [(a, e) for a, e in itertools.product(ROLES, RoleEvent)
                                     if not ROLE_TRANSITIONS.allows(a, e)])
def test_every_event_the_table_has_no_edge_for_raises_and_changes_nothing(a, event):
    member = member_in(a)
    before = (list(member.changes), member.leader_id, member.curr_term, member.curr_vote_for)
    with pytest.raises(IllegalTransition, match=f"role {a.value} has no transition on {event.name}"):
        fire(member, event)
    assert member.role is a
    assert (member.changes, member.leader_id, member.curr_term, member.curr_vote_for) == before


def test_every_event_has_an_edge_and_only_start_has_none():
    used = {e for _a, e, _b in ROLE_TRANSITIONS}
    assert used == set(ROLE_EVENTS)


def test_the_harness_may_force_any_role_from_any_role():
    for a in ROLES:
        assert ROLE_TRANSITIONS.next_state(a, RoleEvent.FORCED_LEADER) is Role.LEADER
        assert ROLE_TRANSITIONS.next_state(a, RoleEvent.FORCED_FOLLOWER) is Role.FOLLOWER


def test_the_same_role_and_term_again_is_told_once():
    leader = member_in(Role.LEADER)
    leader.on_event(RoleEvent.FORCED_LEADER, 1)
    assert [c.role for c in leader.changes].count(Role.LEADER) == 1


# -- dispatchers ------------------------------------------------------------------------------
REACHABLE = (DispatchState.COMPARE, DispatchState.TRUNCATE, DispatchState.APPEND, DispatchState.INSTALL_SNAPSHOT)

#: each event as the pusher reports it, through the progress's named methods
REPORT = {
    DispatchEvent.COMPARE_MATCHED: lambda pr: pr.on_compare_match(5),
    DispatchEvent.COMPARE_MISMATCH: lambda pr: pr.compare_mismatch(3),
    DispatchEvent.COMPARE_REFUSED: lambda pr: pr.compare_refused(),
    DispatchEvent.TRUNCATED: lambda pr: pr.truncated(),
    DispatchEvent.TRUNCATE_REFUSED: lambda pr: pr.truncate_refused(20),
    DispatchEvent.APPEND_INCONSISTENT: lambda pr: pr.append_inconsistent(20),
    DispatchEvent.PUSH_REFUSED: lambda pr: pr.push_refused(),
    DispatchEvent.PUSH_TIMED_OUT: lambda pr: pr.push_timed_out(),
    DispatchEvent.LOG_LOST: lambda pr: pr.lost_log(2, 20),
    DispatchEvent.FOLLOWER_RECOVERING: lambda pr: pr.start_recovery(20, 7),
    DispatchEvent.BEHIND_BEGIN: lambda pr: pr.behind_begin(),
    DispatchEvent.INSTALLED: lambda pr: pr.installed(8),
    DispatchEvent.INSTALL_REFUSED: lambda pr: pr.install_refused(20),
}


def progress_in(state: DispatchState) -> FollowerProgress:
    pr = FollowerProgress("n1", 10, 4)
    if state is not DispatchState.COMPARE:
        pr.on_compare_match(5)
    if state is DispatchState.APPEND:
        pr.truncated()
    if state is DispatchState.INSTALL_SNAPSHOT:
        pr.behind_begin()
    assert pr.state is state
    return pr


def test_every_dispatcher_event_has_a_named_method_and_an_edge():
    assert set(REPORT) == set(DispatchEvent) == {e for _a, e, _b in TRANSITIONS}


@pytest.mark.parametrize("a,event,b", list(TRANSITIONS))
def test_every_dispatcher_transition_of_the_table_takes_the_state_it_names(a, event, b):
    pr = progress_in(a)
    pr.inflights.add(6, 2, 0)
    seq = pr.control_seq
    REPORT[event](pr)
    assert pr.state is b
    assert not pr.inflights and pr.control_sent_ms == -1 and pr.control_seq > seq
    if b is DispatchState.APPEND:
        assert pr.next == pr.match + 1
    elif event is DispatchEvent.INSTALLED:
        assert pr.match == 8                     # the follower's log now starts after 8
    elif b is DispatchState.COMPARE and a is not DispatchState.COMPARE:
        assert pr.next == 21                     # compare again from the leader's end


@pytest.mark.parametrize("a,event", [(a, e) for a, e in itertools.product(REACHABLE, DispatchEvent)
                                     if not TRANSITIONS.allows(a, e)])
def test_every_dispatcher_event_without_an_edge_raises_and_changes_nothing(a, event):
    pr = progress_in(a)
    before = (pr.state, pr.next, pr.match, pr.control_seq, pr.recovering, pr.epoch)
    with pytest.raises(IllegalTransition, match=f"n1: dispatcher {a.value} has no transition on {event.name}"):
        REPORT[event](pr)
    assert (pr.state, pr.next, pr.match, pr.control_seq, pr.recovering, pr.epoch) == before


def test_commit_is_never_entered_nor_left_and_an_install_leads_to_a_truncate():
    for a, _e, b in TRANSITIONS:
        assert DispatchState.COMMIT not in {a, b}
    assert [(e, b) for a, e, b in TRANSITIONS if a is DispatchState.INSTALL_SNAPSHOT and b is not DispatchState.COMPARE] \
        == [(DispatchEvent.INSTALLED, DispatchState.TRUNCATE)]
