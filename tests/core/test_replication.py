"""EntryPusher / EntryHandler / StateMachineCaller, stepped directly."""

import pytest

from core.wiring import Wired
from dledger.core import Role
from dledger.entry import MAGIC_NORMAL
from dledger.protocol import DLedgerResponseCode as Code, PushEntryRequest, PushEntryType
from dledger.store import DLedgerMemoryStore


def elected(n=3, seed=1, **cfg):
    w = Wired(n, seed=seed, **cfg)
    assert w.run_until(lambda: w.leader() is not None, 3000)
    return w


def test_appends_replicate_and_commit_with_positions_equal_everywhere():
    w = elected()
    lead = w.leader()
    for k in range(20):
        w.propose(lead, k, [bytes([k]) * 100])
    w.run(20)
    assert all(w.completions[k].response.code == Code.SUCCESS for k in range(20))
    assert [w.completions[k].response.index for k in range(20)] == list(range(20))
    assert [w.completions[k].response.pos for k in range(20)] == [k * 148 for k in range(20)]
    for node in w.nodes.values():
        assert node.store.ledger_end_index == 19 and node.committed_index == 19
        assert [node.store.get_raw(i) for i in range(20)] == [w.nodes[lead].store.get_raw(i) for i in range(20)]


def test_batch_append_returns_every_position():
    w = elected()
    lead = w.leader()
    bodies = [b"x" * 128 * (i + 1) for i in range(10)]
    w.propose(lead, "b", bodies)
    w.run(10)
    r = w.completions["b"].response
    assert r.code == Code.SUCCESS and r.index == 9
    assert r.positions == [48 * i + 128 * i * (i + 1) // 2 for i in range(10)]


def test_proposal_on_a_follower_fails_with_not_leader_and_a_hint():
    w = elected()
    lead = w.leader()
    follower = next(i for i in w.ids if i != lead)
    w.propose(follower, "f", [b"x"])
    r = w.completions["f"].response
    assert r.code == Code.NOT_LEADER and r.leader_id == lead


def test_without_a_quorum_appends_time_out_then_pending_full_is_immediate():
    w = elected(2, max_wait_ack_time_ms=500, max_pending_requests_num=5, enable_leader_elector=True)
    lead = w.leader()
    other = next(i for i in w.ids if i != lead)
    w.stop(other)
    for k in range(5):
        w.propose(lead, k, [b"x"])
    w.propose(lead, "full", [b"x"])
    assert w.completions["full"].response.code == Code.LEADER_PENDING_FULL
    w.run(501)
    codes = {w.completions[k].response.code for k in range(5) if k in w.completions}
    # the leader either timed the appends out or stepped down (check-quorum) and expired them
    assert codes and codes <= {Code.WAIT_QUORUM_ACK_TIMEOUT, Code.EXPIRED_TERM}
    assert w.nodes[lead].committed_index == -1


def test_appends_pending_at_a_term_change_fail_with_expired_term():
    w = elected(3, seed=2, max_wait_ack_time_ms=5000)
    lead = w.leader()
    w.cut.add(lead)
    w.propose(lead, "lost", [b"x"])
    assert w.run_until(lambda: any(n.role is Role.LEADER for i, n in w.nodes.items() if i != lead), 3000)
    assert "lost" not in w.completions
    w.cut.clear()                     # the old leader learns the new term
    assert w.run_until(lambda: "lost" in w.completions, 1000)
    assert w.completions["lost"].response.code == Code.EXPIRED_TERM
    assert w.run_until(lambda: w.nodes[lead].store.ledger_end_index == -1, 1000)   # tail truncated


def test_lost_pushes_are_resent_after_the_push_timeout():
    w = elected(3, seed=3, max_push_timeout_ms=200)
    lead = w.leader()
    n = {"k": 0}

    def drop_every_third_push(env):
        if isinstance(env.msg, PushEntryRequest) and env.msg.type == PushEntryType.APPEND:
            n["k"] += 1
            return n["k"] % 3 == 0
        return False

    w.drop = drop_every_third_push
    for k in range(10):
        w.propose(lead, k, [b"m%d" % k])
        w.run(5)
    w.run(1000)
    assert all(w.completions[k].response.code == Code.SUCCESS for k in range(10))
    assert all(node.store.ledger_end_index == 9 for node in w.nodes.values())


def test_follower_with_a_divergent_uncommitted_tail_is_truncated_and_refilled():
    w = elected(3, seed=4)
    lead = w.leader()
    for k in range(5):
        w.propose(lead, k, [b"c%d" % k])
    w.run(50)
    # the leader writes a tail nobody else sees, then is cut off
    w.cut.add(lead)
    w.propose(lead, "tail", [b"t1", b"t2", b"t3"])
    assert w.nodes[lead].store.ledger_end_index == 7
    assert w.run_until(lambda: any(n.role is Role.LEADER for i, n in w.nodes.items() if i != lead), 3000)
    new = next(i for i, n in w.nodes.items() if n.role is Role.LEADER and i != lead)
    w.propose(new, "after", [b"n1"])
    w.run(50)
    w.cut.clear()
    assert w.run_until(lambda: w.nodes[lead].store.ledger_end_index == 5
                       and w.nodes[lead].committed_index == 5, 3000)
    assert w.nodes[lead].store.get(5).body == b"n1"
    assert w.completions["tail"].response.code in (Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT)


def test_out_of_order_pushes_wait_for_their_predecessor():
    w = elected(2, seed=5, max_push_in_flight=4, max_batch_append_count=1)
    lead = w.leader()
    held = []

    def hold_first_append(env):
        if isinstance(env.msg, PushEntryRequest) and env.msg.type == PushEntryType.APPEND \
                and env.msg.first_entry_index == 0 and not held:
            held.append(env)
            return True
        return False

    w.drop = hold_first_append
    w.propose(lead, "a", [b"a", b"b", b"c"])
    other = next(i for i in w.ids if i != lead)
    assert w.nodes[other].store.ledger_end_index == -1
    assert len(w.nodes[other].handler.waiting) == 2
    w.drop = None
    w.queue.append(held[0])
    w.deliver()
    assert w.nodes[other].store.ledger_end_index == 2 and not w.nodes[other].handler.waiting
    assert w.completions["a"].response.code == Code.SUCCESS


def test_state_machine_applies_committed_entries_once_in_order_and_answers():
    class Counter:
        def __init__(self):
            self.seen = []

        def on_apply(self, entries):
            for a in entries:
                self.seen.append(a.index)
                a.resp = len(self.seen)

    sms = {}
    w = Wired(3, seed=6, start=False)
    import random
    from dledger.core import Node
    for i in w.ids:
        sms[i] = Counter()
        w.nodes[i] = Node(w.config(i), w.stores[i], random.Random(hash(i) % 100), state_machine=sms[i], now_ms=0)
    assert w.run_until(lambda: w.leader() is not None, 3000)
    lead = w.leader()
    w.nodes[lead].read(w.now, "noop", 1)      # RAFT_LOG_READ appends a NOOP, not applied
    w._collect(w.nodes[lead])
    for k in range(10):
        w.propose(lead, k, [b"v%d" % k])
    w.run(300)
    assert w.completions["noop"].response.code == Code.SUCCESS
    assert [w.completions[k].result for k in range(10)] == list(range(1, 11))
    for i in w.ids:
        assert sms[i].seen == list(range(1, 11))


def test_read_modes_on_leader_and_follower():
    from dledger.protocol import ReadMode
    w = elected(3, seed=7)
    lead = w.leader()
    follower = next(i for i in w.ids if i != lead)
    w.propose(lead, "w", [b"x"])
    w.run(10)
    for mode in ReadMode:
        w.nodes[lead].read(w.now, ("L", mode), mode)
        w._collect(w.nodes[lead])
        w.nodes[follower].read(w.now, ("F", mode), mode)
        w._collect(w.nodes[follower])
    w.run(300)
    for mode in ReadMode:
        assert w.completions[("L", mode)].response.code == Code.SUCCESS, mode
        expected = Code.SUCCESS if mode is ReadMode.UNSAFE_READ else Code.NOT_LEADER
        assert w.completions[("F", mode)].response.code == expected, mode


def _old_term_entries_uncommitted(w):
    """The leader's entry reaches the followers but no acknowledgement comes back; then the
    leader dies. Returns the old leader's id."""
    from dledger.protocol import PushEntryResponse
    lead = w.leader()
    w.drop = lambda env: isinstance(env.msg, PushEntryResponse)
    w.propose(lead, "first", [b"x"])
    w.run(5)
    w.drop = None
    w.stop(lead)
    assert all(n.store.ledger_end_index == 0 and n.committed_index == -1 for n in w.nodes.values())
    assert w.run_until(lambda: w.leader() is not None, 3000)
    return lead


def test_without_fast_advance_an_old_term_entry_waits_for_a_new_one():
    w = elected(3, seed=8)
    _old_term_entries_uncommitted(w)
    w.run(2000)
    assert all(n.committed_index == -1 for n in w.nodes.values())
    w.propose(w.leader(), "second", [b"y"])
    w.run(50)
    r = w.completions["second"].response
    assert (r.code, r.index) == (Code.SUCCESS, 1)
    assert all(n.committed_index == 1 for n in w.nodes.values())


def test_fast_advance_commit_index_commits_old_entries_with_a_noop():
    w = elected(3, seed=8, enable_fast_advance_commit_index=True)
    _old_term_entries_uncommitted(w)
    w.run(300)
    lead = w.leader()
    assert w.nodes[lead].store.get(1).magic != MAGIC_NORMAL
    assert all(n.committed_index == 1 for n in w.nodes.values())


class _CutRecorder(DLedgerMemoryStore):
    """A memory store that records where it was truncated."""

    def __init__(self) -> None:
        super().__init__(data_file_size=1 << 20, suspect=None)
        self.cuts: list[int] = []

    def truncate(self, truncate_index: int) -> int:
        self.cuts.append(truncate_index)
        return super().truncate(truncate_index)


def _written(store, terms_bodies):
    for term, body in terms_bodies:
        if store.current_term < term:
            store.persist_term(term, None)
        store.batch_append_as_leader([body])
    return store


@pytest.mark.parametrize("holds_its_term", [True, False], ids=["leader-holds-the-tail-term", "leader-lacks-it"])
def test_compare_backs_up_to_the_last_agreeing_entry_never_below_it(holds_its_term):
    # Seed 91056 (fsync): a follower whose stale tail came from the term of the prefix it
    # shares with the new leader answered COMPARE with the first index of that term (0); the
    # leader compared there, matched below every shared entry and its TRUNCATE dropped the
    # whole log, committed entries included, until they were pushed again.
    shared_term = 2 if holds_its_term else 1
    shared = [(shared_term, b"c%d" % i) for i in range(5)]
    stale = [(2, b"old%d" % i) for i in range(5, 8)]
    stores = {"n0": _written(_CutRecorder(), shared + [(3, b"new5"), (3, b"new6")]),
              "n1": _written(_CutRecorder(), shared + stale),
              "n2": _written(_CutRecorder(), shared)}
    w = Wired(3, seed=1, stores=stores)
    w.cut.add("n2")             # n0 and n1 alone: n0 wins (its last entry has the higher term)
    assert w.run_until(lambda: w.leader() == "n0" and stores["n1"].ledger_end_index == 6
                       and stores["n1"].get_entry_term(6) == 3, 3000)
    assert stores["n1"].cuts == [5]             # only the entries that differ were dropped
    assert [stores["n1"].get(i).body for i in range(7)] == [b"c0", b"c1", b"c2", b"c3", b"c4", b"new5", b"new6"]
