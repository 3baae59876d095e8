"""The simulator's environment: virtual time, simulated processes and the network fault model."""

import random

import pytest

from dledger.protocol import Envelope, HeartBeatRequest, PushEntryRequest, PushEntryType
from dledger.sim import NetworkOptions, SimNetwork, SimScheduler
from dledger.sim.scheduler import SIM_EPOCH, ProcessKilled


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


def test_a_killed_process_runs_none_of_its_timers_and_refuses_host_calls():
    s = SimScheduler()
    a, b = s.process("a"), s.process("b")
    out = []
    a.call_at(5, out.append, "a5")
    a.call_soon(out.append, "a0")
    b.call_at(5, out.append, "b5")
    s.call_at(6, out.append, "root6")
    s.run_until(1)
    a.kill()
    assert a.call_at(7, out.append, "a7").cancelled       # armed after death: never runs
    with pytest.raises(ProcessKilled):
        a.call_soon_threadsafe(out.append, "host")
    with pytest.raises(ProcessKilled):
        a.run_sync(lambda: None)
    assert b.run_sync(lambda: "alive") == "alive"
    s.run_until(10)
    assert out == ["a0", "b5", "root6"]


def test_the_wall_clock_is_virtual_and_the_flush_stays_on_the_one_thread():
    s = SimScheduler()
    p = s.process("n0")
    assert p.wall_time() == s.wall_time() == SIM_EPOCH
    s.run_until(2_500)
    assert p.wall_time() == SIM_EPOCH + 2.5
    assert s.background_flush is False and p.background_flush is False


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


def test_every_envelope_is_delivered_as_a_fresh_copy_decoded_from_the_wire_bytes():
    s, net, got = _net(duplicate=1.0)
    push = PushEntryRequest(group="g", term=2, type=PushEntryType.APPEND, entries=bytearray(b"\x01" * 64),
                            first_entry_index=3, count=1, last_entry_term=2, commit_index=1)
    sent = Envelope("a", "b", 9, False, push)
    net.endpoints["a"].send(sent)
    push.entries[0] = 0xFF                                  # the sender reuses its buffer at once
    s.run_until(50)
    assert len(got["b"]) == 2 and got["b"][0] is not got["b"][1]
    for env in got["b"]:
        assert env is not sent and env.msg is not push
        assert env.msg.entries == b"\x01" * 64 and type(env.msg.entries) is bytes
        assert (env.src, env.dst, env.request_id, env.msg.first_entry_index) == ("a", "b", 9, 3)


def test_without_the_codec_the_receiver_gets_the_sent_object():
    s, net, got = _net(codec=False)
    sent = env("a", "b")
    net.endpoints["a"].send(sent)
    s.run_until(50)
    assert got["b"] == [sent] and got["b"][0] is sent


def test_a_message_the_codec_cannot_carry_fails_at_send():
    s, net, got = _net()
    with pytest.raises(TypeError, match="not a protocol message"):
        net.endpoints["a"].send(Envelope("a", "b", 1, False, {"a": "dict"}))


def test_a_paused_process_runs_no_timer_until_it_resumes_while_time_moves_on_for_others():
    s = SimScheduler()
    a, b = s.process("a"), s.process("b")
    out = []
    a.call_at(10, lambda: out.append(("a10", s.now)))
    a.call_at(30, lambda: out.append(("a30", s.now)))
    b.call_at(20, lambda: out.append(("b20", s.now)))
    s.run_until(5)
    a.pause()
    assert a.paused and repr(a) == "SimProcess(a, paused)"
    s.run_until(100)
    assert out == [("b20", 20)] and s.now == 100
    a.resume()
    s.run_until(100)
    assert out == [("b20", 20), ("a10", 100), ("a30", 100)]     # in the order they came due


def test_a_timed_pause_ends_by_itself_and_a_longer_pause_is_not_shortened():
    s = SimScheduler()
    a = s.process("a")
    out = []
    a.call_at(10, lambda: out.append(s.now))
    a.pause(50)
    a.pause(20)                                         # shorter: no effect
    s.run_until(49)
    assert out == [] and a.paused
    a.pause(200)                                        # longer: extends it to 249
    s.run_until(248)
    assert out == []
    s.run_until(300)
    assert out == [249] and not a.paused


def test_a_timer_cancelled_during_a_pause_does_not_run_on_resume():
    s = SimScheduler()
    a = s.process("a")
    out = []
    t = a.call_at(10, out.append, "cancelled")
    a.call_at(10, out.append, "kept")
    a.pause()
    s.run_until(20)
    t.cancel()
    a.call_soon(out.append, "armed while paused")
    a.resume()
    s.run_until(30)
    assert out == ["kept", "armed while paused"]          # what came due first runs first


def test_killing_a_paused_process_drops_what_waited():
    s = SimScheduler()
    a = s.process("a")
    out = []
    a.call_at(10, out.append, "a10")
    a.pause()
    a.hold(out.append, "message")
    s.run_until(20)
    a.kill()
    a.resume()
    s.run_until(40)
    assert out == [] and not a.paused
