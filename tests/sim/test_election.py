"""Java DLedger's LeaderElectorTest and election scenarios under faults, in virtual time."""

import pytest

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code
from dledger.sim import Cluster

INTERVAL = 100   # heart_beat_time_interval_ms default


def roles(c):
    return sorted(c.servers[i].role.value for i in c.live())


def test_a_single_node_leads_at_once_and_again_after_restart_in_the_same_term(tmp_path):
    with Cluster(n=1, seed=1, store="file", base_dir=tmp_path) as c:
        assert c.run_until(lambda: c.leader() == "n0", 1_000)
        futures = [c.append(b"%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
        assert all(f.result().code == Code.SUCCESS for f in futures)
        term = c.servers["n0"].node.term
        c.restart("n0")
        assert c.run_until(lambda: c.leader() == "n0", 1_000)
        assert c.servers["n0"].node.term == term
        c.check()


@pytest.mark.parametrize("seed", range(10))
def test_three_nodes_settle_on_one_leader_and_two_followers(seed):
    with Cluster(n=3, seed=seed) as c:
        c.run_for(2_000)
        assert roles(c) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        c.check()


@pytest.mark.parametrize("n", [3, 5])
def test_killing_the_leader_elects_another_within_a_second(n):
    with Cluster(n=n, seed=11) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        c.crash(old)
        t0 = c.now_ms
        assert c.run_until(lambda: c.leader() not in (None, old), 5 * INTERVAL * 3)
        assert c.now_ms - t0 < 1_000
        f = c.append(b"after")
        assert c.run_until(f.done, 1_000) and f.result().code == Code.SUCCESS
        c.check()


def test_restarting_a_follower_keeps_the_leader_and_it_rejoins_in_the_same_term():
    with Cluster(n=3, seed=12) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        term = c.servers[lead].node.term
        for follower in [i for i in c.ids if i != lead]:
            c.restart(follower)
            assert c.run_until(lambda: c.servers[follower].role is Role.FOLLOWER, 2_000)
            assert c.leader() == lead and c.servers[follower].node.term == term
        c.check()


def test_a_leader_whose_followers_died_steps_down_keeping_its_term():
    with Cluster(n=3, seed=13) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        term = c.servers[lead].node.term
        for i in c.ids:
            if i != lead:
                c.crash(i)
        assert c.run_until(lambda: c.servers[lead].role is Role.CANDIDATE, 4 * INTERVAL + 50)
        c.run_for(3_000)
        assert c.servers[lead].node.term == term          # no term inflation without a quorum
        c.check()


def test_the_preferred_leader_takes_over_and_takes_it_back_after_a_restart():
    with Cluster(n=3, seed=14, preferred_leader_ids="n2") as c:
        assert c.run_until(lambda: c.leader() == "n2", 4_000)
        c.crash("n2")
        assert c.run_until(lambda: c.leader() in ("n0", "n1"), 2_000)
        term = c.servers[c.leader()].node.term
        c.restart("n2")
        assert c.run_until(lambda: c.leader() == "n2", 4_500)
        assert c.servers["n2"].node.term > term
        c.check()


def test_leadership_moves_to_the_chosen_node_ten_times_then_appends_succeed():
    with Cluster(n=3, seed=15) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        for k in range(10):
            lead = c.leader()
            target = c.ids[(c.ids.index(lead) + 1 + k % 2) % 3]
            # the transferee must know who leads (DLedger answers INCONSISTENT_LEADER otherwise)
            assert c.run_until(lambda: c.servers[target].leader_id == lead, 1_000)
            f = c.servers[lead].transfer_leadership(target)
            assert c.run_until(f.done, 2_000)
            assert f.result().code == Code.SUCCESS, f.result()
            assert c.run_until(lambda: c.leader() == target, 2_000)
        futures = [c.append(b"%d" % i) for i in range(5)]
        assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
        assert all(f.result().code == Code.SUCCESS for f in futures)
        c.check()


def test_transfer_to_a_follower_that_lags_too_far_is_refused():
    with Cluster(n=3, seed=16, max_leadership_transfer_wait_index=5) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        lagging = next(i for i in c.ids if i != lead)
        c.crash(lagging)
        futures = [c.append(b"%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
        f = c.servers[lead].transfer_leadership(lagging)
        assert c.run_until(f.done, 100)
        assert f.result().code == Code.FALL_BEHIND_TOO_MUCH
        c.check()


def test_an_isolated_follower_keeps_its_term_and_rejoins_without_disruption():
    with Cluster(n=3, seed=17) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        follower = next(i for i in c.ids if i != lead)
        term = c.servers[lead].node.term
        c.partition([follower], [i for i in c.ids if i != follower])
        c.run_for(50 * 3 * INTERVAL)
        assert c.servers[follower].node.term == term
        c.heal()
        c.run_for(2_000)
        assert c.leader() == lead and c.servers[lead].node.term == term
        c.check()


def test_role_changes_reach_handlers_once_each_in_term_order():
    with Cluster(n=3, seed=18) as c:
        seen = {i: [] for i in c.ids}
        for i in c.ids:
            c.servers[i].add_role_change_handler(seen[i].append)
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        c.crash(c.leader())
        c.run_for(2_000)
        for changes in seen.values():
            keys = [(ch.term, ch.role) for ch in changes]
            assert all(a != b for a, b in zip(keys, keys[1:]))
            assert [k[0] for k in keys] == sorted(k[0] for k in keys)
        c.check()
