"""Time faults: per-machine clocks (drift, jumps, wall-clock steps), the drift bound the read
lease relies on, and paused processes in a running cluster."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from dledger.core import Role
from dledger.protocol import ReadMode
from dledger.sim import Cluster, SimScheduler
from dledger.sim.clocks import SIM_EPOCH, ClockOptions, SimClock, lease_is_safe, max_safe_drift


def test_an_ideal_clock_reads_virtual_time_and_arms_timers_unchanged():
    s = SimScheduler()
    p = s.process("a")
    out = []
    p.call_at(42, lambda: out.append((s.now, p.now_ms())))
    s.run_until(100)
    assert out == [(42, 42)] and p.now_ms() == 100 and p.wall_time() == SIM_EPOCH + 0.1


@pytest.mark.parametrize("rate", [0.5, 0.9, 1.1, 1.5])
def test_a_drifting_clock_runs_at_its_rate_and_its_timers_fire_in_local_time(rate):
    s = SimScheduler()
    p = s.process("a", SimClock(s, rate))
    out = []
    p.call_at(300, lambda: out.append((s.now, p.now_ms())))
    s.run_until(1_000)
    virtual, local = out[0]
    assert local >= 300 > int((virtual - 1) * rate)         # the first millisecond it is due
    assert p.now_ms() == int(1_000 * rate)


def test_a_forward_jump_moves_both_clocks_and_a_wall_step_moves_only_the_wall_clock():
    s = SimScheduler()
    clock = SimClock(s)
    s.run_until(100)
    clock.jump(500)
    assert clock.now_ms() == 600 and clock.wall_time() == pytest.approx(SIM_EPOCH + 0.6)
    clock.jump_wall(-3600)
    assert clock.now_ms() == 600 and clock.wall_time() == pytest.approx(SIM_EPOCH + 0.6 - 3600)
    with pytest.raises(ValueError, match="never goes back"):
        clock.jump(-1)


steps = st.lists(st.one_of(
    st.tuples(st.just("run"), st.integers(0, 500)),
    st.tuples(st.just("rate"), st.floats(0.2, 3.0)),
    st.tuples(st.just("jump"), st.integers(0, 1_000)),
    st.tuples(st.just("wall"), st.floats(-1e4, 1e4)),
), max_size=30)


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(0, 5_000))
def test_the_monotonic_clock_never_goes_back_and_timers_fire_exactly_when_it_reaches_them(ops, target):
    s = SimScheduler()
    clock = SimClock(s)
    last = clock.now_ms()
    for kind, arg in ops:
        if kind == "run":
            s.run_until(s.now + arg)
        elif kind == "rate":
            clock.set_rate(arg)
        elif kind == "jump":
            clock.jump(arg)
        else:
            clock.jump_wall(arg)
        assert clock.now_ms() >= last
        last = clock.now_ms()
    local = last + target
    t = clock.to_virtual(local)
    if t > s.now:
        s.run_until(t - 1)
        assert clock.now_ms() < local                       # not early
    s.run_until(t)
    assert clock.now_ms() >= local                          # and not late


def test_the_drift_bound_of_the_lease():
    assert max_safe_drift(0.8) == pytest.approx(1 / 9)
    assert lease_is_safe(0.8, 0.1) and not lease_is_safe(0.8, 0.12)
    assert lease_is_safe(0.5, 0.3) and not lease_is_safe(0.5, 0.34)


def test_default_clock_options_draw_nothing_and_keep_clocks_ideal():
    rng = random.Random(5)
    state = rng.getstate()
    assert ClockOptions().draw_rate(rng) == 1.0 and rng.getstate() == state
    opts = ClockOptions(max_drift=0.05, max_jump_ms=100, max_wall_jump_s=10)
    rates = [opts.draw_rate(rng) for _ in range(200)]
    assert all(0.95 <= r <= 1.05 for r in rates) and max(rates) > 1.03 and min(rates) < 0.97
    s = SimScheduler()
    clock = SimClock(s)
    before = clock.now_ms()
    for _ in range(20):
        opts.jolt(clock, rng)
    assert before <= clock.now_ms() <= before + 2_000


# -- the read lease under drifting clocks ---------------------------------------------------

def _lease_read_after_a_new_leader_commits(seed: int, leader_rate: float, follower_rate: float):
    """Leader and followers with drifting clocks; the leader is cut off just after a quorum
    confirmed it; the others elect a leader and commit an append; the moment that append is
    acknowledged, a LEASE_READ goes to the old leader. Returns (append response, read response)."""
    with Cluster(n=3, seed=seed) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        for node_id in c.ids:
            c.processes[node_id].clock.set_rate(leader_rate if node_id == old else follower_rate)
        first = c.append(b"first")
        assert c.run_until(first.done, 1_000) and first.result().ok
        c.run_for(600)
        assert c.leader() == old
        beats = c.servers[old].node.elector.heartbeats
        confirmed = beats.last_succ_heartbeat_ms
        assert c.run_until(lambda: beats.last_succ_heartbeat_ms > confirmed, 1_000)
        rest = [i for i in c.ids if i != old]
        c.partition([old], rest)
        assert c.run_until(lambda: c.leader() in rest, 3_000)
        deadline, tries = c.now_ms + 3_000, 0
        kept = c.append(b"kept-0")
        while not (kept.done() and kept.result().ok):
            assert c.now_ms < deadline, "the new leader commits nothing"
            if kept.done():                         # refused (no leader yet): try again shortly
                c.run_for(10)
                tries += 1
                kept = c.append(f"kept-{tries}".encode())
            else:
                c.run_until(kept.done, 100)
        read = c.read(ReadMode.LEASE_READ, via=old)
        assert c.run_until(read.done, 1_000)
        c.heal()
        c.run_for(1_000)
        c.check()
        return kept.result(), read.result()


@pytest.mark.parametrize("leader_rate,follower_rate", [(1.1, 0.9), (0.9, 1.1), (1 - 0.11, 1 + 0.11)])
@pytest.mark.parametrize("seed", range(4))
def test_a_lease_read_on_a_cut_off_leader_is_never_stale_within_the_drift_bound(seed, leader_rate, follower_rate):
    drift = max(abs(1 - leader_rate), abs(1 - follower_rate))
    assert lease_is_safe(0.8, drift)
    kept, read = _lease_read_after_a_new_leader_commits(seed, leader_rate, follower_rate)
    assert not read.ok or read.index >= kept.index, \
        f"stale lease read: index {read.index} after index {kept.index} was acknowledged elsewhere"


def test_beyond_the_drift_bound_a_cut_off_leader_serves_a_stale_lease_read():
    """The bound is real: a leader clock 40 % slow and follower clocks 40 % fast let the old
    leader's lease outlive the next leader's first commit (the lease test above is not vacuous)."""
    assert not lease_is_safe(0.8, 0.4)
    kept, read = _lease_read_after_a_new_leader_commits(0, 0.6, 1.4)
    assert read.ok and read.index < kept.index


# -- paused processes in a cluster ------------------------------------------------------------

def test_a_paused_leader_is_replaced_and_on_resume_steps_down_before_acknowledging_anything():
    with Cluster(n=3, seed=4) as c:
        for node_id in c.ids:
            c.network.bind(node_id, c.processes[node_id])
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        old_term = c.servers[old].node.term
        before = c.append(b"before")
        assert c.run_until(before.done, 1_000) and before.result().ok
        election_timeout = 300
        c.processes[old].pause(3 * election_timeout)
        during = [c.append(f"during-{k}".encode(), via=old) for k in range(3)]
        assert c.run_until(lambda: c.leader() not in (None, old), 3 * election_timeout)
        assert c.processes[old].paused and c.servers[old].role is Role.LEADER    # frozen, unaware
        kept = c.append(b"kept")
        assert c.run_until(kept.done, 1_000) and kept.result().ok
        seen = []
        c.servers[old].driver.ready_listeners.append(lambda ready: seen.append(
            (c.servers[old].node.term, c.servers[old].role,
             [x.response for x in ready.completions if getattr(x.response, "ok", False)])))
        assert c.run_until(lambda: not c.processes[old].paused, 3 * election_timeout)
        c.run_for(1_000)
        assert seen, "the resumed leader did nothing"
        assert not [acks for term, _role, acks in seen if term == old_term and acks]
        assert any(role is not Role.LEADER for _term, role, _acks in seen)
        assert all(f.done() and not f.result().ok for f in during)
        assert c.servers[old].node.term > old_term
        c.check()


# -- safety does not depend on clocks ---------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_wild_clocks_break_no_safety_invariant(seed):
    """Clock rates from half to double speed, forward jumps of up to two election timeouts and
    wall-clock steps, under changing partitions of every shape: elections misfire, but no
    term has two leaders and no acknowledged append is lost."""
    from dledger.sim import partitions as shapes
    rng = random.Random(seed)
    wild = ClockOptions(max_jump_ms=600, max_wall_jump_s=3_600)
    with Cluster(n=5, seed=seed) as c:
        for node_id in c.ids:
            c.processes[node_id].clock.set_rate(rng.uniform(0.5, 2.0))
        seq = 0
        for step in range(30):
            c.run_for(100)
            for _ in range(3):
                c.append(f"w{seed}-{seq}".encode())
                seq += 1
            if step % 3 == 0:
                wild.jolt(c.processes[rng.choice(c.ids)].clock, rng)
            if step % 5 == 0:
                c.heal()
                shape = rng.choice(["halves", "leader", "ring", "bridge", "one_way"])
                leader = c.leader() or rng.choice(c.ids)
                c.network.block({"halves": lambda: shapes.random_halves(c.ids, rng),
                                 "leader": lambda: shapes.isolate(c.ids, leader),
                                 "ring": lambda: shapes.majority_ring(c.ids, rng),
                                 "bridge": lambda: shapes.bridge(c.ids, rng),
                                 "one_way": lambda: shapes.one_way(c.ids, rng)}[shape]())
        c.heal()
        assert c.run_until(lambda: c.leader() is not None, 5_000)
        final = c.append(b"final")
        c.run_until(final.done, 3_000)
        c.run_for(2_000)
        assert c.history.counts()["ok"] > 0
        c.check()
