"""EntryPusher / EntryHandler / StateMachineCaller, stepped directly.

The replication cases that read as a story are transcripts (``testdata/*.txt``, see
``transcript.py``): ``replicate_and_commit_positions_equal_everywhere``,
``appends_without_quorum_time_out_and_pending_full``,
``pending_appends_expire_at_a_term_change``, ``lost_pushes_are_resent_after_the_push_timeout``,
``divergent_uncommitted_tail_is_truncated_and_refilled``,
``out_of_order_pushes_wait_for_their_predecessor``, ``read_modes_on_leader_and_follower``,
``old_term_entry_waits_for_an_entry_of_the_new_term``,
``fast_advance_commits_old_entries_with_a_noop`` (and a proposal on a follower in
``election_and_replication``). What stays here needs what a transcript cannot express: the
positions of a batch's response, a state machine, stores written before the cluster starts.
"""

import pytest

from core.wiring import Wired
from dledger.protocol import DLedgerResponseCode as Code
from dledger.store import DLedgerMemoryStore


def elected(n=3, seed=1, **cfg):
    w = Wired(n, seed=seed, **cfg)
    assert w.run_until(lambda: w.leader() is not None, 3000)
    return w


def test_batch_append_returns_every_position():
    w = elected()
    lead = w.leader()
    bodies = [b"x" * 128 * (i + 1) for i in range(10)]
    w.propose(lead, "b", bodies)
    w.run(10)
    r = w.completions["b"].response
    assert r.code == Code.SUCCESS and r.index == 9
    assert r.positions == [48 * i + 128 * i * (i + 1) // 2 for i in range(10)]


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
