"""Java DLedger's CommitIndexTest and the Raft paper's figure 8: entries of an old term commit only through
a current-term entry (a client append, or the NOOP of fast commit advance)."""

import pytest

from dledger.protocol import DLedgerResponseCode as Code, PushEntryResponse, PushEntryType
from dledger.sim import Cluster


def _first_entry_stored_but_never_acknowledged(c: Cluster):
    assert c.run_until(lambda: c.leader() == "n0", 4_000)
    c.network.drop_if = lambda env: (isinstance(env.msg, PushEntryResponse) and env.dst == "n0"
                                     and env.msg.type == PushEntryType.APPEND)
    f = c.append(b"first")
    assert c.run_until(f.done, 4_000)
    assert f.result().code == Code.WAIT_QUORUM_ACK_TIMEOUT
    assert all(s.node.committed_index == -1 and s.store.ledger_end_index == 0 for s in c.servers.values())
    c.network.drop_if = None
    c.crash("n0")
    assert c.run_until(lambda: c.leader() in ("n1", "n2"), 2_000)


def test_an_old_term_entry_stays_uncommitted_until_a_new_append_commits_it():
    with Cluster(n=3, seed=1, preferred_leader_ids="n0") as c:
        _first_entry_stored_but_never_acknowledged(c)
        c.run_for(2_000)
        assert all(c.servers[i].node.committed_index == -1 for i in c.live())
        f = c.append(b"second")
        assert c.run_until(f.done, 1_000)
        assert (f.result().code, f.result().index) == (Code.SUCCESS, 1)
        assert c.run_until(lambda: all(c.servers[i].node.committed_index == 1 for i in c.live()), 1_000)
        c.restart("n0")
        assert c.run_until(lambda: c.leader() == "n0", 5_000)
        assert c.run_until(lambda: c.servers["n0"].node.committed_index >= 1, 1_000)
        c.check()


def test_fast_commit_advance_commits_old_entries_with_a_noop_at_election():
    with Cluster(n=3, seed=1, preferred_leader_ids="n0", enable_fast_advance_commit_index=True) as c:
        _first_entry_stored_but_never_acknowledged(c)
        assert c.run_until(lambda: all(c.servers[i].node.committed_index == 1 for i in c.live()), 2_000)
        f = c.append(b"third")
        assert c.run_until(f.done, 1_000)
        assert (f.result().code, f.result().index) == (Code.SUCCESS, 2)
        c.restart("n0")
        assert c.run_until(lambda: c.leader() == "n0", 5_000)
        assert c.run_until(lambda: c.servers["n0"].node.committed_index == 2, 1_000)
        c.check()


@pytest.mark.parametrize("seed", range(20))
def test_figure_8_schedule_never_commits_an_entry_that_is_later_overwritten(seed):
    """Raft Figure 8 (RP-02), as a crash schedule on five nodes: leaders of successive terms
    write to a minority and crash; acknowledged appends must survive every later leader."""
    with Cluster(n=5, seed=seed) as c:
        for round_ in range(6):
            assert c.run_until(lambda: c.leader() is not None, 3_000)
            lead = c.leader()
            others = [i for i in c.ids if i != lead]
            minority = others[:1]
            c.partition([lead] + minority, [i for i in others if i not in minority])
            c.append(b"r%d-%d" % (seed, round_))
            c.run_for(20)
            c.crash(lead)
            c.heal()
            c.run_for(400)
            c.restart(lead)
        c.run_for(2_000)
        f = c.append(b"final-%d" % seed)
        assert c.run_until(lambda: f.done() and f.result().ok, 3_000)
        c.check()
