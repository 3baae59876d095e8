"""``Node._after`` settles for real: after every entry point it runs passes until a pass leaves
no role change unreacted to, however many that takes, and a node that never settles is a bug
named by an ``AssertionError`` carrying its state (never a silent stop)."""

import random

import pytest

from dledger.config import DLedgerConfig
from dledger.core import Node, Role, RoleEvent
from dledger.core.node import MAX_SETTLE_PASSES
from dledger.store import DLedgerMemoryStore


def node() -> Node:
    cfg = DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3", group="g").validate()
    n = Node(cfg, DLedgerMemoryStore(data_file_size=1 << 16, suspect=None), random.Random(1))
    n.take_ready()
    return n


def flipping(n: Node, times: int | None):
    """A stand-in for the pusher's ``pump`` (which may step a leader down, after the pass's
    role reactions) that turns the node follower, then candidate, then follower ... once per
    call (``times`` calls, or for ever)."""
    member, calls = n.member_state, [0]

    def pump(_now: int) -> tuple:
        if times is not None and calls[0] >= times:
            return ()
        calls[0] += 1
        if member.role is Role.FOLLOWER:
            member.on_event(RoleEvent.ELECTION_TIMEOUT, member.curr_term)
        else:
            member.on_event(RoleEvent.LEADER_HEARD, member.curr_term, "n1")
        return ()

    return pump


def test_a_node_whose_roles_change_more_than_eight_times_in_one_step_reacts_to_every_change():
    n = node()
    seen = []
    react = n.handler.on_role_change
    n.handler.on_role_change = lambda change: (seen.append(change.role), react(change))[1]
    n.pusher.pump = flipping(n, 12)
    n.tick(1)
    expected = [Role.FOLLOWER, Role.CANDIDATE] * 6
    assert seen == expected
    assert [c.role for c in n.take_ready().role_changes] == expected
    assert n.role is Role.CANDIDATE and n.member_state.changes == []    # all reacted to: cleared


def test_a_node_that_never_settles_raises_an_assertion_naming_its_state():
    n = node()
    n.pusher.pump = flipping(n, None)
    with pytest.raises(AssertionError) as caught:
        n.tick(1)
    message = str(caught.value)
    assert f"n0 did not settle after {MAX_SETTLE_PASSES} passes at 1 ms" in message
    assert "role change(s) not reacted to" in message and "FOLLOWER in term" in message
    assert "MemberState(n0" in message
