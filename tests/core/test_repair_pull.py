"""The repair pull between nodes of the core: any node answers with a record it reads intact,
and an answer to a pull confirms nothing about the asker's leadership (no lease, no read
index comes from it: the answering node checks neither term nor leader)."""

from __future__ import annotations

from core.wiring import Wired
from dledger.protocol import PullEntriesRequest, PullEntriesResponse


def hears(node, answers: list) -> None:
    """Record the answers to ``node``'s repair pulls (the node hands them to its repairer)."""
    on_answer = node.repairer.on_answer
    node.repairer.on_answer = lambda now, index, peer, resp: (answers.append(resp),
                                                              on_answer(now, index, peer, resp))


def test_a_pull_is_answered_with_the_record_and_confirms_no_leadership():
    w = Wired(3)
    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    w.propose(lead, "t", [b"x"])
    assert w.run_until(lambda: all(n.committed_index >= 0 for n in w.nodes.values()))
    node = w.nodes[lead]
    contacts, answers = [], []
    note = node.elector.note_contact
    node.elector.note_contact = lambda now, peer, sent: (contacts.append(peer), note(now, peer, sent))
    w.drop = lambda env: not isinstance(env.msg, (PullEntriesRequest, PullEntriesResponse))
    follower = next(i for i in w.ids if i != lead)
    req = PullEntriesRequest(group=node.member_state.group, local_id=lead, remote_id=follower,
                             term=node.term, node_id=lead, begin_index=0)
    hears(node, answers)
    node.send(follower, req, (0, follower))     # the answer goes to the repairer, with the index asked
    w._collect(node)
    w.deliver()
    assert len(answers) == 1 and answers[0].entries == [w.stores[follower].get_raw(0)]
    assert contacts == []


def test_a_pull_answer_carries_the_next_record_too_the_askers_proof_by_log_matching():
    w = Wired(3)
    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    w.propose(lead, "t", [b"x", b"y", b"z"])
    assert w.run_until(lambda: all(n.committed_index >= 2 for n in w.nodes.values()))
    node = w.nodes[lead]
    follower = next(i for i in w.ids if i != lead)
    raw = w.stores[follower].get_raw
    answers = []
    hears(node, answers)
    for begin, want in ((1, [raw(1), raw(2)]), (2, [raw(2)])):    # nothing after the last one
        answers.clear()
        req = PullEntriesRequest(group=node.member_state.group, local_id=lead, remote_id=follower,
                                 term=node.term, node_id=lead, begin_index=begin)
        node.send(follower, req, (begin, follower))
        w._collect(node)
        w.deliver()
        assert [bytes(e) for e in answers[0].entries] == [bytes(r) for r in want]


def test_a_pull_answer_says_whether_the_log_ends_before_the_index_and_whether_it_recovers():
    """The leader's judgement of a damaged entry no peer holds (core.damaged_tail) rests on
    these two fields: ``absent`` only when the answering log ends before the index asked."""
    w = Wired(3)
    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    w.propose(lead, "t", [b"x", b"y"])
    assert w.run_until(lambda: all(n.committed_index >= 1 for n in w.nodes.values()))
    follower = next(i for i in w.ids if i != lead)
    repairer = w.nodes[follower].repairer
    ask = lambda begin: repairer.handle_pull(PullEntriesRequest(  # noqa: E731
        group="g", local_id=lead, remote_id=follower, node_id=lead, begin_index=begin))
    held, past = ask(1), ask(2)
    assert held.entries and not held.absent
    assert not past.entries and past.absent
    assert held.recovering is past.recovering is (w.stores[follower].suspect is not None)
