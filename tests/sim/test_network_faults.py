"""The network's fault model beyond delay, loss and duplication: per-link delays, replays of old
frames, corruption in transit, clogged links, partition shapes and paused receivers."""

import random

import pytest

from dledger.protocol import Envelope, HeartBeatRequest
from dledger.sim import NetworkOptions, SimNetwork, SimScheduler
from dledger.sim import partitions as shapes


def _net(nodes=("a", "b"), **opts):
    s = SimScheduler()
    net = SimNetwork(s, random.Random(1), NetworkOptions(**opts))
    got = {node: [] for node in nodes}
    for node in got:
        net.endpoint(node).set_receiver(lambda e, node=node: got[node].append((s.now, e.request_id)))
    return s, net, got


def env(src, dst, k=0, term=-1):
    return Envelope(src, dst, k, False, HeartBeatRequest(term=term))


def test_a_link_with_its_own_delay_range_keeps_to_it_and_other_links_keep_the_default():
    s, net, got = _net(min_delay_ms=1, max_delay_ms=3, link_delays={("a", "b"): (40, 60)})
    for k in range(100):
        net.endpoints["a"].send(env("a", "b", k))
        net.endpoints["b"].send(env("b", "a", k))
    s.run_until(200)
    assert len(got["b"]) == 100 and all(40 <= t <= 60 for t, _k in got["b"])
    assert [k for _t, k in got["b"]] != sorted(k for _t, k in got["b"])       # jitter reorders
    assert len(got["a"]) == 100 and all(1 <= t <= 3 for t, _k in got["a"])
    net.set_link("b", "a", 7, 7)
    net.endpoints["b"].send(env("b", "a", 500))
    s.run_until(300)
    assert got["a"][-1] == (207, 500)


def test_replays_redeliver_old_frames_after_a_long_delay():
    s, net, got = _net(replay=0.5, replay_window=4, replay_min_delay_ms=500, replay_max_delay_ms=800)
    for k in range(40):
        net.endpoints["a"].send(env("a", "b", k))
        s.run_until(s.now + 10)
    s.run_until(2_000)
    firsts, replays = {}, []
    for t, k in got["b"]:
        if k in firsts:
            replays.append((t, k))
        else:
            firsts[k] = t
    assert sorted(firsts) == list(range(40))
    assert net.replayed > 5 and len(replays) == net.replayed
    for t, k in replays:
        sent_at = k * 10
        assert t - sent_at >= 500                   # an old frame, long after it was sent
        assert t - sent_at <= 800 + 4 * 10 + 10     # from the window of the 4 latest frames


def test_a_replay_respects_partitions_and_closed_endpoints_at_delivery():
    s, net, got = _net(replay=1.0, replay_min_delay_ms=100, replay_max_delay_ms=100)
    net.endpoints["a"].send(env("a", "b", 1))
    net.endpoints["a"].send(env("a", "b", 2))       # replays frame 1 (the only one so far)
    s.run_until(50)
    net.partition(["a"], ["b"])
    s.run_until(500)
    assert sorted(k for _t, k in got["b"]) == [1, 2] and net.replayed == 1      # the replay was dropped


def test_corrupted_frames_are_detected_and_dropped_never_delivered():
    s, net, got = _net(corrupt=1.0)
    for k in range(200):
        net.endpoints["a"].send(env("a", "b", k))
    s.run_until(100)
    assert got["b"] == [] and net.corrupted == net.rejected == 200 and net.delivered == 0


def test_with_some_corruption_only_intact_frames_arrive_and_arrive_unchanged():
    s, net, got = _net(corrupt=0.3, duplicate=0.5)
    delivered = []
    net.endpoints["b"].set_receiver(delivered.append)
    sent = [env("a", "b", k, term=k * 7) for k in range(300)]
    for e in sent:
        net.endpoints["a"].send(e)
    s.run_until(100)
    assert 0 < net.rejected == net.corrupted and net.delivered == len(delivered)
    by_id = {e.request_id: e for e in sent}
    assert all(e == by_id[e.request_id] for e in delivered)
    assert net.delivered + net.rejected > 300                # duplicates are damaged independently


def test_corruption_needs_the_codec():
    with pytest.raises(ValueError, match="codec"):
        NetworkOptions(corrupt=0.1, codec=False).validate()
    with pytest.raises(ValueError, match="probability"):
        NetworkOptions(loss=1.5).validate()


def test_a_clogged_link_holds_its_messages_then_releases_them_in_order():
    s, net, got = _net(min_delay_ms=1, max_delay_ms=1)
    net.clog("a", "b", 100)
    for k in range(5):
        net.endpoints["a"].send(env("a", "b", k))
        net.endpoints["b"].send(env("b", "a", k))
        s.run_until(s.now + 10)
    assert got["b"] == [] and len(got["a"]) == 5              # only the clogged direction waits
    s.run_until(99)
    assert got["b"] == []
    s.run_until(101)
    assert got["b"] == [(100, k) for k in range(5)]           # nothing lost, order kept
    net.endpoints["a"].send(env("a", "b", 9))
    s.run_until(120)
    assert got["b"][-1] == (102, 9)                          # the clog is over


def test_unclog_and_heal_release_a_clogged_link_at_once():
    s, net, got = _net()
    net.clog("a", "b", 10_000)
    net.endpoints["a"].send(env("a", "b", 1))
    s.run_until(50)
    net.unclog("a", "b")
    s.run_until(51)
    assert [k for _t, k in got["b"]] == [1]
    net.clog("a", "b", 10_000)
    net.endpoints["a"].send(env("a", "b", 2))
    s.run_until(100)
    net.heal()
    s.run_until(101)
    assert [k for _t, k in got["b"]] == [1, 2] and not net.clogged


def test_a_longer_clog_extends_a_shorter_one():
    s, net, got = _net(min_delay_ms=1, max_delay_ms=1)
    net.clog("a", "b", 50)
    net.clog("a", "b", 200)
    net.endpoints["a"].send(env("a", "b", 1))
    s.run_until(150)
    assert got["b"] == []
    s.run_until(250)
    assert got["b"] == [(200, 1)]


def test_a_paused_receiver_gets_its_messages_in_order_when_it_resumes():
    s, net, got = _net(min_delay_ms=1, max_delay_ms=1)
    proc = s.process("b")
    net.bind("b", proc)
    proc.pause()
    for k in range(10):
        net.endpoints["a"].send(env("a", "b", k))
        s.run_until(s.now + 5)
    s.run_until(100)
    assert got["b"] == [] and net.delivered == 10            # arrived, waiting for the process
    proc.resume()
    s.run_until(101)
    assert got["b"] == [(100, k) for k in range(10)]


def test_messages_held_for_a_process_that_is_killed_are_dropped():
    s, net, got = _net()
    proc = s.process("b")
    net.bind("b", proc)
    proc.pause()
    net.endpoints["a"].send(env("a", "b", 1))
    s.run_until(20)
    proc.kill()
    proc.resume()
    s.run_until(40)
    assert got["b"] == []


def test_blocking_a_shape_blocks_exactly_its_links():
    ids = ["a", "b", "c"]
    s, net, got = _net(nodes=ids)
    net.block(shapes.one_way_out(ids, "a"))
    for x in ids:
        for y in ids:
            if x != y:
                net.endpoints[x].send(env(x, y))
    s.run_until(50)
    assert len(got["a"]) == 2 and len(got["b"]) == 1 and len(got["c"]) == 1


def _majority(n):
    return n // 2 + 1


@pytest.mark.parametrize("n", [3, 5])
def test_random_halves_split_the_nodes_in_two_with_no_link_between(n):
    ids = [f"n{i}" for i in range(n)]
    for seed in range(20):
        blocked = shapes.random_halves(ids, random.Random(seed))
        seen = shapes.connected(ids, blocked)
        groups = {frozenset(v) for v in seen.values()}
        assert len(groups) == 2 and set().union(*groups) == set(ids)
        a, b = groups
        assert not a & b and all((x, y) in blocked and (y, x) in blocked for x in a for y in b)
        assert len(blocked) == 2 * len(a) * len(b)


@pytest.mark.parametrize("n", [3, 5])
def test_isolate_cuts_one_node_off_both_ways_and_leaves_the_rest_whole(n):
    ids = [f"n{i}" for i in range(n)]
    leader = ids[1]
    seen = shapes.connected(ids, shapes.isolate(ids, leader))
    assert seen[leader] == {leader}
    assert all(seen[i] == set(ids) - {leader} for i in ids if i != leader)


@pytest.mark.parametrize("n", [3, 4, 5, 7])
def test_majority_ring_gives_every_node_a_majority_and_no_two_nodes_the_same(n):
    ids = [f"n{i}" for i in range(n)]
    for rng in (None, random.Random(n)):
        seen = shapes.connected(ids, shapes.majority_ring(ids, rng))
        assert all(len(v) >= _majority(n) for v in seen.values())
        if n > 3:
            assert all(v != set(ids) for v in seen.values())    # nobody sees everyone
        views = [frozenset(v) for v in seen.values()]
        assert len(set(views)) == n                             # no two nodes agree on their majority
        for i, x in enumerate(ids):                             # links are symmetric
            for y in ids[i + 1:]:
                assert (y in seen[x]) == (x in seen[y])


@pytest.mark.parametrize("n", [3, 5])
def test_a_bridge_node_joins_two_halves_that_cannot_talk(n):
    ids = [f"n{i}" for i in range(n)]
    for rng in (None, random.Random(3)):
        blocked = shapes.bridge(ids, rng)
        seen = shapes.connected(ids, blocked)
        bridges = [x for x in ids if seen[x] == set(ids)]
        assert len(bridges) == 1
        middle = bridges[0]
        rest = [x for x in ids if x != middle]
        halves = {frozenset(seen[x] - {middle}) for x in rest}
        assert len(halves) == 2 and all(len(h) == (n - 1) // 2 for h in halves)
        assert all(len(seen[x]) == _majority(n) for x in rest)   # each half plus the bridge


@pytest.mark.parametrize("n", [3, 5])
def test_one_way_shapes_block_one_direction_only(n):
    ids = [f"n{i}" for i in range(n)]
    out, inn = shapes.one_way_out(ids, "n0"), shapes.one_way_in(ids, "n0")
    assert out == {("n0", i) for i in ids[1:]} and inn == {(i, "n0") for i in ids[1:]}
    assert not out & inn
    for seed in range(10):
        drawn = shapes.one_way(ids, random.Random(seed))
        assert len(drawn) == n - 1 and all((y, x) not in drawn for x, y in drawn)


@pytest.mark.parametrize("n", [3, 5])
def test_every_named_shape_blocks_some_links_and_isolate_leader_cuts_off_the_leader(n):
    ids = [f"n{i}" for i in range(n)]
    rng = random.Random(n)
    for name in shapes.SHAPES:
        blocked = shapes.shape(name, ids, rng, leader="n1")
        assert blocked and all(x in ids and y in ids and x != y for x, y in blocked)
    assert shapes.connected(ids, shapes.shape("isolate_leader", ids, rng, leader="n2"))["n2"] == {"n2"}
    assert shapes.shape("isolate_leader", ids, rng) and shapes.isolate_leader(ids, "n0") == shapes.isolate(ids, "n0")
    with pytest.raises(ValueError, match="unknown partition shape"):
        shapes.shape("triangle", ids, rng)


def test_what_a_process_sends_after_pausing_itself_leaves_when_the_pause_ends():
    """A slow sync pauses the node's process inside the crank that goes on to send: its
    messages leave when the pause ends, in order, and never if the process is killed first."""
    s, net, got = _net(min_delay_ms=1, max_delay_ms=1)
    for name, kill in (("a", False), ("b", True)):
        proc = s.process(name)
        net.bind(name, proc)

        def crank(proc=proc, name=name, kill=kill):
            proc.pause(50)                             # a slow msync inside the crank
            other = "b" if name == "a" else "a"
            net.endpoints[name].send(env(name, other, 1))
            net.endpoints[name].send(env(name, other, 2))
            if kill:
                s.call_at(s.now + 10, proc.kill)

        proc.call_at(100, crank)
    s.run_until(300)
    assert got["b"] == [(151, 1), (151, 2)]            # a's messages: after its 50 ms pause
    assert got["a"] == []                              # b died during its pause: nothing left it
