"""The simulator's environment: virtual time and the network fault model."""

import random

import pytest

from dledger.protocol import Envelope, HeartBeatRequest
from dledger.sim import NetworkOptions, SimNetwork, SimScheduler


def test_events_run_in_time_order_and_fifo_within_a_millisecond():
    s = SimScheduler()
    out = []
    s.call_at(5, out.append, "b")
    s.call_at(1, out.append, "a")
    s.call_at(5, out.append, "c")
    t = s.call_at(3, out.append, "cancelled")
    t.cancel()
    s.run_until(10)
    assert out == ["a", "b", "c"] and s.now == 10


def test_run_until_stops_as_soon_as_the_predicate_holds():
    s = SimScheduler()
    out = []
    for k in range(10):
        s.call_at(k * 10, out.append, k)
    assert s.run_until(1_000, stop=lambda: len(out) == 3)
    assert s.now == 20


def test_a_callback_rearming_itself_at_now_is_reported_as_a_livelock():
    s = SimScheduler()
    s.max_events_per_ms = 1_000

    def spin():
        s.call_soon(spin)

    s.call_soon(spin)
    with pytest.raises(RuntimeError, match="livelock"):
        s.run_until(5)


def _net(**opts):
    s = SimScheduler()
    net = SimNetwork(s, random.Random(1), NetworkOptions(**opts))
    got = {"a": [], "b": []}
    for node in got:
        net.endpoint(node).set_receiver(got[node].append)
    return s, net, got


def env(src, dst, k=0):
    return Envelope(src, dst, k, False, HeartBeatRequest())


def test_delays_stay_in_bounds_and_reorder_messages():
    s, net, got = _net(min_delay_ms=2, max_delay_ms=20)
    times = []
    net.endpoints["b"].set_receiver(lambda e: times.append((s.now, e.request_id)))
    for k in range(200):
        net.endpoints["a"].send(env("a", "b", k))
    s.run_until(100)
    assert len(times) == 200 and all(2 <= t <= 20 for t, _k in times)
    assert [k for _t, k in times] != sorted(k for _t, k in times)     # overtaking happens


def test_partitions_block_both_ways_and_cuts_one_way():
    s, net, got = _net()
    net.partition(["a"], ["b"])
    net.endpoints["a"].send(env("a", "b"))
    net.endpoints["b"].send(env("b", "a"))
    s.run_until(50)
    assert got == {"a": [], "b": []}
    net.heal()
    net.cut("a", "b")
    net.endpoints["a"].send(env("a", "b"))
    net.endpoints["b"].send(env("b", "a"))
    s.run_until(100)
    assert len(got["a"]) == 1 and got["b"] == []


def test_a_partition_drops_messages_already_in_flight():
    s, net, got = _net(min_delay_ms=10, max_delay_ms=10)
    net.endpoints["a"].send(env("a", "b"))
    s.run_until(5)
    net.partition(["a"], ["b"])
    s.run_until(50)
    assert got["b"] == []


def test_loss_and_duplication():
    s, net, got = _net(loss=1.0)
    net.endpoints["a"].send(env("a", "b"))
    s.run_until(50)
    assert got["b"] == []
    s, net, got = _net(duplicate=1.0)
    net.endpoints["a"].send(env("a", "b"))
    s.run_until(50)
    assert len(got["b"]) == 2


def test_a_closed_endpoint_receives_nothing():
    s, net, got = _net()
    net.endpoints["b"].close()
    net.endpoints["a"].send(env("a", "b"))
    s.run_until(50)
    assert got["b"] == []
