"""Election scenarios of the reliability catalogue (docs/catalogue.md), in virtual time.

Each test names the behaviour it proves; its docstring names the catalogue row. Safety
(one leader per term, agreed committed prefixes, acknowledged appends kept) is also checked
by ``Cluster.check()`` at the end of each.
"""

import pytest

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code, Envelope, LeadershipTransferRequest, PushEntryRequest
from dledger.sim import Cluster
from dledger.sim.network import NetworkOptions

ELECTION_TIMEOUT = 300        # max_heart_beat_leak (3) x heart_beat_time_interval_ms (100)


def _slow_links_of(node: str, ids: list[str], lo: int = 20, hi: int = 30) -> dict:
    return {(a, b): (lo, hi) for a in ids for b in ids if a != b and node in (a, b)}


def _commit(c: Cluster, body: bytes, timeout_ms: int = 3_000) -> None:
    """An append through whoever leads commits within ``timeout_ms`` (retrying refusals)."""
    deadline = c.now_ms + timeout_ms
    while c.now_ms < deadline:
        if c.run_until(lambda: c.leader() is not None, deadline - c.now_ms):
            f = c.append(body)
            if c.run_until(f.done, max(1, deadline - c.now_ms)) and f.result().ok:
                return
            c.run_for(50)
    raise AssertionError(f"no append committed within {timeout_ms} ms: "
                         f"{ {i: (s.role.value, s.node.term) for i, s in c.servers.items()} }")


@pytest.mark.parametrize("n", [3, 5])
def test_a_fresh_cluster_elects_one_leader_within_two_election_timeouts(n):
    """EL-01: 100 seeds each, fresh stores, no faults."""
    for seed in range(100):
        with Cluster(n=n, seed=seed) as c:
            assert c.run_until(lambda: c.leader() is not None, 2 * ELECTION_TIMEOUT), seed
            c.run_for(500)
            assert [c.servers[i].role for i in c.ids].count(Role.LEADER) == 1, seed
            c.check()


@pytest.mark.parametrize("seed", range(10))
def test_five_nodes_with_identical_vote_delays_still_elect_and_terms_stay_small(seed):
    """EL-02: the vote delay has no jitter at all (min = max), so every round starts
    everywhere at once and splits the vote; only message timing breaks the tie. A leader
    still comes within 20 rounds, and the term grows by at most one per round."""
    delay = 150
    with Cluster(n=5, seed=seed, min_vote_interval_ms=delay, max_vote_interval_ms=delay) as c:
        rounds = 20
        assert c.run_until(lambda: c.leader() is not None, rounds * (delay + 100))
        rounds_run = c.now_ms // delay + 1
        assert max(s.node.term for s in c.servers.values()) <= rounds_run
        _commit(c, b"after")
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_an_isolated_leader_acknowledges_nothing_steps_down_and_a_new_term_takes_over(seed):
    """EL-03: 5 nodes under steady appends; the leader is cut off for ten election timeouts.
    The others elect a leader of a higher term; every append made through the old leader
    meanwhile fails or stays unanswered, never SUCCESS; the old leader steps down by
    check-quorum while still cut off."""
    with Cluster(n=5, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        old_term = c.servers[old].node.term
        _commit(c, b"before")
        rest = [i for i in c.ids if i != old]
        c.partition([old], rest)
        cut_at = c.now_ms
        via_old, stepped_down_at = [], None
        while c.now_ms < cut_at + 10 * ELECTION_TIMEOUT:
            via_old.append(c.append(b"old-%d" % len(via_old), via=old))
            lead = c.leader()
            if lead in rest:
                c.append(b"new-%d" % c.now_ms, via=lead)
            c.run_for(20)
            if stepped_down_at is None and c.servers[old].role is not Role.LEADER:
                stepped_down_at = c.now_ms
        assert stepped_down_at is not None and stepped_down_at - cut_at <= 2 * ELECTION_TIMEOUT
        assert c.leader() in rest and c.servers[c.leader()].node.term > old_term
        assert not [f for f in via_old if f.done() and f.result().ok]
        c.heal()
        _commit(c, b"after")
        c.run_for(1_000)
        assert not [f for f in via_old if f.done() and f.result().ok]
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_node_that_missed_a_hundred_writes_is_not_elected_while_another_holds_them(seed):
    """EL-05 (DLedger#52): C is cut off while 100 appends commit on A and B and runs its
    failed elections; then the leader A dies as C comes back. Only B, which holds every
    acknowledged append, can win; C cannot, its log being behind."""
    with Cluster(n=3, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        a = c.leader()
        b, cc = [i for i in c.ids if i != a]
        c.partition([cc], [a, b])
        futures = [c.append(b"w%03d" % k) for k in range(100)]
        assert c.run_until(lambda: all(f.done() for f in futures), 3_000)
        assert all(f.result().ok for f in futures)
        c.run_for(10 * ELECTION_TIMEOUT)               # C's elections fail
        c.crash(a)
        c.heal()
        leaders = set()
        for _ in range(3_000):
            c.run_for(1)
            leaders |= {i for i in c.live() if c.servers[i].role is Role.LEADER}
        assert leaders == {b}
        assert c.servers[cc].store.ledger_end_index == c.servers[b].store.ledger_end_index
        c.check()


@pytest.mark.parametrize("seed", range(10))
def test_a_lagging_node_with_a_higher_term_rejoins_as_follower_and_a_leader_is_stable(seed):
    """EL-06 (DLedger#144): a node comes back behind on the log but ahead on the term, over a
    slower link. Its answers (refusals carrying its higher term) depose the leader; the
    cluster must move to that term and elect a node with the whole log, and the lagging node
    must follow it and catch up. Regression: a deposed leader asked for votes again in its
    old term, won them from the other follower before the lagging node's refusal arrived,
    and was deposed again, for ever (8 of these 10 seeds never converged)."""
    with Cluster(n=3, seed=seed, network=NetworkOptions(link_delays=_slow_links_of("n2", ["n0", "n1", "n2"]))) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lagging = "n2" if c.leader() != "n2" else "n1"
        c.crash(lagging)
        futures = [c.append(b"x%d" % k) for k in range(20)]
        assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
        term = c.servers[c.leader()].node.term
        c._memory[lagging].persist_term(term + 5, None)        # it ran elections of its own meanwhile
        c.restart(lagging)
        end = c.servers[c.leader()].store.ledger_end_index

        def converged():
            lead = c.leader()
            return lead is not None and lead != lagging and c.servers[lagging].role is Role.FOLLOWER \
                and all(s.store.ledger_end_index == end for s in c.servers.values())

        assert c.run_until(converged, 10 * ELECTION_TIMEOUT)
        lead, lead_term = c.leader(), c.servers[c.leader()].node.term
        assert lead_term >= term + 5
        c.run_for(2_000)
        assert c.leader() == lead and c.servers[lead].node.term == lead_term
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_leadership_transfer_replayed_to_a_lagging_follower_does_not_stop_the_cluster(seed):
    """EL-06 and EL-12 with NW-07's replay: an old transfer request of the current term
    reaches a follower that now lags (its pushes are held back), and makes it stand with its
    short log. The cluster must still converge on one leader with the whole log, the
    lagging node following it."""
    ids = ["n0", "n1", "n2"]
    with Cluster(n=3, seed=seed, network=NetworkOptions(link_delays=_slow_links_of("n2", ids))) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        lagging = "n2" if lead != "n2" else "n1"
        first = c.append(b"a")
        assert c.run_until(lambda: first.done() and c.servers[lagging].store.ledger_end_index >= 0, 1_000)
        c.network.drop_if = lambda env: env.dst == lagging and type(env.msg) is PushEntryRequest
        futures = [c.append(b"b%d" % k) for k in range(3)]
        assert c.run_until(lambda: all(f.done() and f.result().ok for f in futures), 1_000)
        term = c.servers[lead].node.term
        c.network._send(Envelope(lead, lagging, -5, False, LeadershipTransferRequest(
            group="sim", remote_id=lagging, local_id=lead, leader_id=lead, term=term, transfer_id=lead,
            transferee_id=lagging, take_leadership_ledger_index=0)))
        c.run_for(300)
        c.network.drop_if = None
        end = c.servers[lead].store.ledger_end_index

        def converged():
            now_lead = c.leader()
            return now_lead is not None and all(c.servers[i].role is Role.FOLLOWER for i in ids if i != now_lead) \
                and all(s.store.ledger_end_index >= end for s in c.servers.values())

        assert c.run_until(converged, 10 * ELECTION_TIMEOUT)
        _commit(c, b"after")
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_paused_leader_of_five_is_replaced_and_acknowledges_nothing_when_it_resumes(seed):
    """EL-10 on five nodes: the leader's process stops for three election timeouts (a
    SIGSTOP) with appends queued on it, the others elect, the old leader resumes: it steps
    down without acknowledging anything in its old term."""
    with Cluster(n=5, seed=seed) as c:
        for node_id in c.ids:
            c.network.bind(node_id, c.processes[node_id])
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        old_term = c.servers[old].node.term
        _commit(c, b"before")
        c.processes[old].pause(3 * ELECTION_TIMEOUT)
        during = [c.append(b"during-%d" % k, via=old) for k in range(5)]
        assert c.run_until(lambda: c.leader() not in (None, old), 3 * ELECTION_TIMEOUT)
        _commit(c, b"kept")
        acks_in_old_term = []
        c.servers[old].driver.ready_listeners.append(lambda ready: acks_in_old_term.extend(
            x.response for x in ready.completions
            if getattr(x.response, "ok", False) and c.servers[old].node.term == old_term))
        assert c.run_until(lambda: not c.processes[old].paused, 3 * ELECTION_TIMEOUT)
        c.run_for(1_000)
        assert acks_in_old_term == []
        assert c.servers[old].role is not Role.LEADER or c.servers[old].node.term > old_term
        assert all(f.done() and not f.result().ok for f in during)
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_transfer_to_a_follower_fifty_entries_behind_completes_after_it_catches_up(seed):
    """EL-12, first half: the transferee lags by 50 entries (within
    ``max_leadership_transfer_wait_index``) over a slow link; the transfer completes, the
    transferee leads with the whole log, and the term moved by exactly one."""
    with Cluster(n=3, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        target = next(i for i in c.ids if i != lead)
        c.crash(target)
        futures = [c.append(b"x%d" % k) for k in range(50)]
        assert c.run_until(lambda: all(f.done() and f.result().ok for f in futures), 2_000)
        c.network.set_link(lead, target, 20, 40)
        c.restart(target)
        # the transferee must know whom it follows (else INCONSISTENT_LEADER); it still lags
        assert c.run_until(lambda: c.servers[target].node.leader_id == lead, 1_000)
        assert c.servers[target].store.ledger_end_index < futures[-1].result().index
        term = c.servers[lead].node.term
        f = c.servers[lead].transfer_leadership(target)
        assert c.run_until(f.done, 2_000)
        assert f.result().code == Code.SUCCESS
        assert c.run_until(lambda: c.leader() == target, 1_000)
        assert c.servers[target].node.term == term + 1
        assert c.servers[target].store.ledger_end_index >= futures[-1].result().index
        _commit(c, b"after")
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_transfer_to_a_follower_that_cannot_catch_up_fails_in_time_and_terms_stop_growing(seed):
    """EL-12, second half (DLedger#85): every push to the transferee is lost, so it never
    reaches the index it must hold. The transfer fails (TAKE_LEADERSHIP_FAILED or another
    refusal) within the transfer timeout plus an RPC, the old leader accepts appends again,
    and no term moves afterwards."""
    with Cluster(n=3, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        target = next(i for i in c.ids if i != lead)
        c.network.drop_if = lambda env: env.dst == target and type(env.msg) is PushEntryRequest
        futures = [c.append(b"x%d" % k) for k in range(20)]
        assert c.run_until(lambda: all(f.done() and f.result().ok for f in futures), 2_000)
        f = c.servers[lead].transfer_leadership(target)
        started = c.now_ms
        timeout = c.servers[lead].config.leadership_transfer_wait_timeout
        assert c.run_until(f.done, timeout + c.servers[lead].config.rpc_timeout_ms)
        assert f.result().code != Code.SUCCESS
        assert c.now_ms - started <= timeout + 2 * 100
        assert c.leader() == lead
        terms = {i: c.servers[i].node.term for i in c.ids}
        after = c.append(b"after")
        assert c.run_until(after.done, 1_000) and after.result().ok
        c.run_for(3_000)
        assert {i: c.servers[i].node.term for i in c.ids} == terms and c.leader() == lead
        c.network.drop_if = None
        c.run_for(2_000)
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_leader_that_can_receive_but_not_send_is_replaced_and_steps_down_on_the_new_term(seed):
    """EL-13, second case: every link out of the leader is cut, links into it work. The
    followers elect a leader of a higher term; the old leader hears that term (the new
    leader's heartbeats reach it) and steps down; once healed, appends commit."""
    with Cluster(n=5, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        old_term = c.servers[old].node.term
        for i in c.ids:
            if i != old:
                c.network.cut(old, i)
        assert c.run_until(lambda: c.leader() not in (None, old), 3_000)
        new = c.leader()
        assert c.servers[new].node.term > old_term
        assert c.run_until(lambda: c.servers[old].role is Role.FOLLOWER
                           and c.servers[old].node.leader_id == new, 2 * ELECTION_TIMEOUT)
        c.heal()
        _commit(c, b"after")
        c.check()
