"""Network-fault scenarios of the reliability catalogue (docs/catalogue.md), in virtual time.

A client appends through the current leader every few milliseconds while the links fail in
the way each test names. ``Cluster.check()`` at the end of each checks one leader per term,
agreed committed prefixes and every acknowledged append in the agreed log; the tests add
what each scenario promises on top (who may commit, how soon a leader returns, how much the
leadership churns).
"""

from __future__ import annotations

import random

import pytest

from dledger.core import Role
from dledger.protocol import VoteRequest
from dledger.sim import Cluster
from dledger.sim.network import NetworkOptions
from dledger.sim.partitions import bridge, connected, isolate, majority_ring, one_way, random_halves

ELECTION_TIMEOUT = 300


class Workload:
    """Appends through whoever leads, one every ``period_ms``; remembers via whom and when."""

    def __init__(self, c: Cluster, period_ms: int = 20) -> None:
        self.c, self.period = c, period_ms
        self.calls: list[tuple] = []          # (future, via, invoked at)
        self.leaders: list[tuple[int, str, int]] = []   # (time, leader, term) at each change
        self.last_tick = -period_ms

    def run_for(self, ms: int) -> None:
        c = self.c
        end = c.now_ms + ms
        while c.now_ms < end:
            lead = c.leader()
            if lead is not None and (not self.leaders or self.leaders[-1][1:] != (lead, c.servers[lead].node.term)):
                self.leaders.append((c.now_ms, lead, c.servers[lead].node.term))
            if lead is not None and c.now_ms - self.last_tick >= self.period:
                self.last_tick = c.now_ms
                self.calls.append((c.append(b"w%d-%d" % (len(self.calls), c.now_ms), via=lead), lead, c.now_ms))
            c.run_for(min(5, end - c.now_ms))

    def acked_between(self, start: int, end: int) -> list[tuple]:
        """Calls invoked at or after ``start`` and acknowledged SUCCESS by ``end``."""
        return [(f, via, at) for f, via, at in self.calls
                if at >= start and f.done() and f.exception() is None and f.result().ok
                and self.c.history_complete_ms(f) <= end]

    def commits_within(self, ms: int) -> bool:
        """L1: an append invoked from now on commits within ``ms``."""
        start = self.c.now_ms
        self.run_for(ms)
        return any(f.done() and f.exception() is None and f.result().ok
                   for f, _via, at in self.calls if at >= start)


def _completion_times(c: Cluster) -> None:
    """Record when each future completed (virtual time) for ``Workload.acked_between``."""
    done_at: dict[int, int] = {}
    orig = c.append

    def append(body, via=None):
        f = orig(body, via)
        f.add_done_callback(lambda fut: done_at.setdefault(id(fut), c.now_ms))
        return f

    c.append = append
    c.history_complete_ms = lambda f: done_at[id(f)]


def _cluster(n: int, seed: int, **kw) -> Cluster:
    c = Cluster(n=n, seed=seed, **kw)
    _completion_times(c)
    assert c.run_until(lambda: c.leader() is not None, 2_000)
    return c


def _majority_side(ids, blocked) -> set[str]:
    """Nodes that can talk both ways with a majority (themselves included)."""
    reach = connected(ids, blocked)
    both = {a: {b for b in reach[a] if a in reach[b]} | {a} for a in ids}
    return {a for a in ids if len(both[a]) > len(ids) // 2}


@pytest.mark.parametrize("seed", range(4))
def test_under_cycling_random_halves_only_the_majority_side_commits(seed):
    """NW-01: five nodes split 3/2 at random, a new split every three to five election
    timeouts, eight times. An append invoked after a split and acknowledged before the next
    one went through a node of the majority side; after the last heal appends commit again."""
    rng = random.Random(seed)
    with _cluster(5, seed) as c:
        w = Workload(c)
        w.run_for(200)
        for _ in range(8):
            c.heal()
            blocked = random_halves(c.ids, rng)
            c.network.block(blocked)
            start = c.now_ms
            w.run_for(rng.randrange(3, 6) * ELECTION_TIMEOUT)
            majority = _majority_side(c.ids, blocked)
            assert {via for _f, via, _at in w.acked_between(start + 1, c.now_ms)} <= majority
        c.heal()
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        assert len(w.acked_between(0, c.now_ms)) > 50
        c.check()


@pytest.mark.parametrize("seed", range(4))
def test_isolating_one_node_after_another_leaves_a_leader_that_commits_after_each_heal(seed):
    """NW-02: the leader, then a follower, then the leader again... each cut off for a few
    election timeouts; after each heal an append commits within ten election timeouts, and
    while one node is cut off the other four keep committing."""
    rng = random.Random(seed)
    with _cluster(5, seed) as c:
        w = Workload(c)
        w.run_for(200)
        for k in range(6):
            lead = c.leader() or rng.choice(c.ids)
            victim = lead if k % 2 == 0 else rng.choice([i for i in c.ids if i != lead])
            c.network.block(isolate(c.ids, victim))
            start = c.now_ms
            w.run_for(4 * ELECTION_TIMEOUT)
            assert {via for _f, via, _at in w.acked_between(start + 1, c.now_ms)} <= set(c.ids) - {victim}
            assert w.acked_between(start + 3 * ELECTION_TIMEOUT, c.now_ms)    # the four commit
            c.heal()
            assert w.commits_within(10 * ELECTION_TIMEOUT), k
        c.check()


@pytest.mark.parametrize("seed", range(4))
def test_a_bridge_keeps_a_leader_on_one_side_committing_without_churn(seed):
    """NW-03 (openraft#2080): two pairs that cannot talk, joined by one bridge node, the
    leader in one pair. The leader still reaches a majority through the bridge and keeps
    committing; the far pair's elections fail without moving anybody's term, so the
    leadership does not change."""
    rng = random.Random(seed)
    with _cluster(5, seed) as c:
        w = Workload(c)
        w.run_for(200)
        lead = c.leader()
        while True:
            blocked = bridge(c.ids, rng)
            reach = connected(c.ids, blocked)
            middle = next(i for i in c.ids if len(reach[i]) == len(c.ids))
            if middle != lead:
                break
        c.network.block(blocked)
        term = c.servers[lead].node.term
        start = c.now_ms
        w.run_for(20 * ELECTION_TIMEOUT)
        assert c.leader() == lead and c.servers[lead].node.term == term
        assert len(w.acked_between(start, c.now_ms)) > 100
        c.heal()
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        c.check()


@pytest.mark.parametrize("seed", range(4))
def test_a_majority_ring_keeps_committing_with_bounded_churn(seed):
    """NW-04: each node hears only its two ring neighbours (a majority each, never the same
    one). Safety always; the leader reaches a majority, so appends keep committing, and
    leadership changes at most a few times in thirty election timeouts."""
    rng = random.Random(seed)
    with _cluster(5, seed) as c:
        w = Workload(c)
        w.run_for(200)
        c.network.block(majority_ring(c.ids, rng))
        start = c.now_ms
        w.run_for(30 * ELECTION_TIMEOUT)
        changes = [x for x in w.leaders if x[0] >= start]
        assert len(changes) <= 3, changes
        assert len(w.acked_between(start, c.now_ms)) > 100
        c.heal()
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        c.check()


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_random_one_way_cuts_keep_safety_and_a_leader_returns_after_the_heal(n, seed):
    """NW-05: random one-way cuts, a new set every few election timeouts; safety throughout
    and L1 after the heal."""
    rng = random.Random(seed)
    with _cluster(n, seed) as c:
        w = Workload(c)
        for _ in range(8):
            c.heal()
            c.network.block(one_way(c.ids, rng))
            w.run_for(rng.randrange(2, 5) * ELECTION_TIMEOUT)
        c.heal()
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        c.check()


@pytest.mark.parametrize("loss", [0.1, 0.3])
@pytest.mark.parametrize("seed", range(3))
def test_lossy_jittery_links_stay_safe_and_a_leader_commits_once_loss_stops(loss, seed):
    """NW-06: five nodes, messages lost with probability ``loss`` and delayed 1-100 ms (so
    they reorder). Safety throughout; once the loss stops, appends commit within ten election
    timeouts."""
    with Cluster(n=5, seed=seed, network=NetworkOptions(min_delay_ms=1, max_delay_ms=100, loss=loss)) as c:
        _completion_times(c)
        w = Workload(c, period_ms=50)
        w.run_for(40 * ELECTION_TIMEOUT)
        c.network.options.loss = 0.0
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        c.check()


@pytest.mark.parametrize("seed", range(4))
def test_duplicated_and_replayed_messages_never_duplicate_entries_or_votes(seed):
    """NW-07: half the messages duplicated and half the sends followed by a replay of an
    older frame (1-10 s old) while leaders change: every acknowledged append is in the log
    once, no body appears twice, one leader per term (duplicated vote answers are not counted
    twice, stale-term messages are ignored)."""
    with Cluster(n=5, seed=seed, network=NetworkOptions(duplicate=0.5, replay=0.5)) as c:
        _completion_times(c)
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        w = Workload(c)
        for _ in range(4):
            w.run_for(5 * ELECTION_TIMEOUT)
            c.crash(c.leader() or "n0")
            w.run_for(3 * ELECTION_TIMEOUT)
            c.restart(next(iter(c.crashed)))
        assert w.commits_within(10 * ELECTION_TIMEOUT)
        bodies = [e.body for e in c.committed_log()]
        assert len(bodies) == len(set(bodies))
        assert c.network.replayed > 100
        c.check()


@pytest.mark.parametrize("heartbeat_ms,first_leader_within_ms", [(100, 3_000), (300, 3_000)])
@pytest.mark.parametrize("seed", range(3))
def test_slow_links_and_clogged_paths_cause_little_churn(seed, heartbeat_ms, first_leader_within_ms):
    """NW-08: every link 25-125 ms one way, and every two seconds one link clogged for 0.5 to
    5 s. The first leader comes within seconds even with the default 100 ms heartbeat, shorter
    than these round trips: a vote round waits one and a half times the slowest recent round
    trip (``core.round_trip``; before, rounds of one heartbeat interval ended before their
    answers came and the first election took up to 30 s). Once a leader is elected the
    leadership changes at most once per clog and appends keep committing."""
    rng = random.Random(seed)
    ids = [f"n{i}" for i in range(5)]
    links = {(a, b): (25, 125) for a in ids for b in ids if a != b}
    with Cluster(n=5, seed=seed, network=NetworkOptions(link_delays=links),
                 heart_beat_time_interval_ms=heartbeat_ms) as c:
        _completion_times(c)
        assert c.run_until(lambda: c.leader() is not None, first_leader_within_ms)
        w = Workload(c)
        start = c.now_ms
        clogs = 10
        for _ in range(clogs):
            a, b = rng.sample(ids, 2)
            c.network.clog(a, b, rng.randrange(500, 5_000))
            w.run_for(2_000)
        assert len([x for x in w.leaders if x[0] >= start]) <= clogs
        assert len(w.acked_between(start, c.now_ms)) > 200
        c.heal()
        assert w.commits_within(10 * heartbeat_ms * 3)
        c.check()


def test_a_node_healed_after_a_thousand_failed_elections_does_not_disrupt_the_leader():
    """NW-11: a follower of five is cut off long enough for a thousand failed elections;
    its rounds find no quorum of valid answers, so its term never moves, and once healed it
    follows the same leader in the same term."""
    with _cluster(5, 11) as c:
        lead = c.leader()
        term = c.servers[lead].node.term
        victim = next(i for i in c.ids if i != lead)
        votes = []
        endpoint = c.network.endpoints[victim]
        send = endpoint.send
        endpoint.send = lambda env: (votes.append(env.msg.term) if isinstance(env.msg, VoteRequest) else None,
                                     send(env))
        c.network.block(isolate(c.ids, victim))
        while len(votes) < 1_000 * (len(c.ids) - 1):       # a round asks every other node
            c.run_for(10_000)
        assert set(votes) == {term} and c.servers[victim].node.term == term
        c.heal()
        c.run_for(10 * ELECTION_TIMEOUT)
        assert c.leader() == lead and c.servers[lead].node.term == term
        assert c.servers[victim].role is Role.FOLLOWER and c.servers[victim].node.leader_id == lead
        c.check()
