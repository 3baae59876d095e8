"""The gRPC v2 endpoint against the official RocketMQ 5.x Python client (PyPI
``rocketmq-python-client`` 5.1.2, in its own virtualenv), with three ``dledger broker``
processes over TCP: the client is given one endpoint (not the master's) and follows the route
to the master. A Producer sends; a SimpleConsumer receives and acks every message; a message
received and not acked comes back after its invisible duration with delivery attempt 2; a
PushConsumer consumes everything. Then the master is killed: a new master redelivers only the
messages that were not acknowledged. And the master is SIGKILLed while the real Producer sends
and a real SimpleConsumer receives and acks: the producer resumes, nothing answered SEND_OK is
lost, the duplicates are counted, and the killed node restarts and catches up."""

import collections
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from dledger.broker.client import BrokerClient, BrokerUnavailable
from dledger.broker.grpc_v2.rocketmq_v2 import definition_pb2 as pb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2 as spb
from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2_grpc
from dledger.transport.loopback import free_ports
from helpers.client_venvs import client_env, client_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "helpers" / "grpc_v2_client.py"
IDS = ("n0", "n1", "n2")
CONFIG = """mapped_file_size_for_entry_data = 4194304
mapped_file_size_for_entry_index = 2097152
heart_beat_time_interval_ms = 500
bootstrap = true
"""


def start(tmp_path, brokers=None):
    """Three brokers; their processes and gRPC ports (``brokers``, a dict, gets each node's
    argv and mini-broker port, for a restart and for reading a replica's queues)."""
    ports = free_ports(3 * len(IDS))
    peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports))
    grpc_ports = dict(zip(IDS, ports[len(IDS):2 * len(IDS)]))
    broker_ports = dict(zip(IDS, ports[2 * len(IDS):]))
    endpoints = ";".join(f"{i}-127.0.0.1:{p}" for i, p in grpc_ports.items())
    config = tmp_path / "broker.toml"
    config.write_text(CONFIG)
    procs = {}
    for i in IDS:
        argv = [sys.executable, "-m", "dledger.cli", "broker", "--config", str(config), "--group", "gb", "--id", i,
                "--peers", peers, "--broker-port", str(broker_ports[i]), "--grpc-endpoints", endpoints,
                "--store-dir", str(tmp_path), "--log-level", "WARNING"]
        procs[i] = spawn(tmp_path, i, argv)
        if brokers is not None:
            brokers[i] = (argv, broker_ports[i])
    return procs, grpc_ports


def spawn(tmp_path, node, argv):
    """One broker process, its output appended to ``<node>.log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open(tmp_path / f"{node}.log", "ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(procs):
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def master_port(port, deadline_s=30.0, not_port=None):
    """The gRPC port the route of ``port``'s broker names (waiting until a master is known)."""
    deadline = time.monotonic() + deadline_s
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        while True:
            try:
                req = spb.QueryRouteRequest()
                req.topic.name = "T"
                r = stub.QueryRoute(req, timeout=5)
                if r.status.code == pb.OK:
                    found = r.message_queues[0].broker.endpoints.addresses[0].port
                    if found != not_port:
                        return found
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, "no master in time"
            time.sleep(0.2)


def run_client(tmp_path, *args, timeout=120):
    r = subprocess.run([client_python("grpc"), str(SCRIPT), *map(str, args)], capture_output=True,
                       env=client_env(tmp_path / "home"), timeout=timeout)
    assert r.returncode == 0, (args, r.stdout.decode()[-2000:], r.stderr.decode()[-3000:])
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def test_the_rocketmq_5_python_client_produces_and_consumes_through_any_broker(tmp_path):
    (tmp_path / "home").mkdir()
    procs, ports = start(tmp_path)
    try:
        master = master_port(ports["n0"])
        follower = next(p for p in ports.values() if p != master)
        assert master_port(follower) == master          # every broker routes to the master
        endpoint = f"127.0.0.1:{follower}"              # the client is given a follower's endpoint

        sent = run_client(tmp_path, "produce", endpoint, "T", 12)["sent"]
        assert [b for _mid, b in sent] == [f"grpc-{i}" for i in range(12)]
        assert len({mid for mid, _b in sent}) == 12 and all(len(mid) == 34 for mid, _b in sent)

        acked = run_client(tmp_path, "simple", endpoint, "T", "G-simple", 12)["acked"]
        assert sorted(acked) == sorted(b for _mid, b in sent)

        run_client(tmp_path, "produce", endpoint, "R", 1)
        r = run_client(tmp_path, "redeliver", endpoint, "R", "G-redeliver")
        assert r["first"] == ["grpc-0", 1] and r["again"] == ["grpc-0", 2]

        consumed = run_client(tmp_path, "push", endpoint, "T", "G-push", 12)["consumed"]
        assert sorted(set(consumed)) == sorted(b for _mid, b in sent)
    finally:
        stop(procs)
    for i in IDS:
        assert procs[i].returncode == 0, (tmp_path / f"{i}.log").read_text()[-3000:]


@pytest.mark.parametrize("argv, words", [
    (["--grpc-port", "70000"], "--grpc-port: 70000"),
    (["--grpc-endpoints", "n0:1"], "--grpc-endpoints"),
    (["--grpc-endpoints", "n1-127.0.0.1:1"], "no entry for n0"),
])
def test_bad_grpc_flags_are_one_line_and_exit_2(argv, words, tmp_path, capsys):
    from dledger.cli import main

    raft = free_ports(1)[0]
    assert main(["broker", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{raft}", "--broker-port",
                 str(free_ports(1)[0]), "--store-dir", str(tmp_path), "--bootstrap",
                 "--config", str(_small_config(tmp_path)), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err


def _small_config(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text("mapped_file_size_for_entry_data = 4194304\nmapped_file_size_for_entry_index = 2097152\n")
    return path


def _stub_receive(port, group, topic, invisible_s, poll_s=1):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        req = spb.ReceiveMessageRequest(batch_size=32)
        req.group.name = group
        req.message_queue.topic.name = topic
        req.message_queue.id = -1
        req.invisible_duration.FromSeconds(invisible_s)
        req.long_polling_timeout.FromSeconds(poll_s)
        frames = list(service_pb2_grpc.MessagingServiceStub(channel).ReceiveMessage(req, timeout=poll_s + 10))
    return frames[0].status.code, [f.message for f in frames if f.HasField("message")]


def _stub_ack(port, group, topic, m):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        req = spb.AckMessageRequest()
        req.group.name, req.topic.name = group, topic
        req.entries.add(message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
        return service_pb2_grpc.MessagingServiceStub(channel).AckMessage(req, timeout=10).status.code


def test_after_a_master_failover_only_unacknowledged_messages_are_delivered_again(tmp_path):
    (tmp_path / "home").mkdir()
    procs, ports = start(tmp_path)
    try:
        master = master_port(ports["n0"])
        sent = run_client(tmp_path, "produce", f"127.0.0.1:{master}", "F", 8)["sent"]
        got, deadline = [], time.monotonic() + 30
        while len(got) < 8:
            assert time.monotonic() < deadline, got
            got += _stub_receive(master, "G", "F", invisible_s=4)[1]
        assert sorted(m.body.decode() for m in got) == sorted(b for _mid, b in sent)
        acked, unacked = got[:5], got[5:]
        assert all(_stub_ack(master, "G", "F", m) == pb.OK for m in acked)

        dead = next(i for i, p in ports.items() if p == master)
        procs[dead].send_signal(signal.SIGKILL)
        procs[dead].wait(10)
        survivor = next(p for i, p in ports.items() if i != dead)
        new_master = master_port(survivor, deadline_s=60, not_port=master)

        again, deadline = [], time.monotonic() + 60
        while len(again) < len(unacked):
            assert time.monotonic() < deadline, (again, unacked)
            code, messages = _stub_receive(new_master, "G", "F", invisible_s=30, poll_s=2)
            assert code in (pb.OK, pb.MESSAGE_NOT_FOUND, pb.HA_NOT_AVAILABLE), code
            again += messages
        assert sorted(m.body for m in again) == sorted(m.body for m in unacked)
        assert all(m.system_properties.delivery_attempt == 2 for m in again)
        # nothing else comes: the acknowledged messages stay acknowledged
        assert _stub_receive(new_master, "G", "F", invisible_s=30, poll_s=5) == (pb.MESSAGE_NOT_FOUND, [])
        assert all(_stub_ack(new_master, "G", "F", m) == pb.OK for m in again)
    finally:
        stop(procs)


FAILOVER_MESSAGES = 400
KILL_AFTER_S = 14               # past the client's first route refresh (10 s after its start): the
                                # failover then waits for a periodic one, as in a client running long
ROUTE_REFRESH_S = 30            # the client asks for its routes again every 30 s
RESUME_BOUND_S = ROUTE_REFRESH_S + 15   # plus the election, a send's attempts and the loaded machine


def _lines(proc, into):
    """Reads a client's JSON lines into ``into`` as they come (a thread: the pipe never fills)."""
    def run():
        for line in proc.stdout:
            if line.startswith(b"{"):
                into.append(json.loads(line))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _queue_bodies(port, topic, queues=4):
    """Every body in ``topic``'s queues on one broker (its mini-broker port), or None while it
    does not answer."""
    bodies = []
    try:
        with BrokerClient(f"x-127.0.0.1:{port}", timeout=5, send_deadline=5) as c:
            for q in range(queues):
                offset = 0
                while True:
                    got, offset = c.pull(topic, q, offset)
                    if not got:
                        break
                    bodies += [m.body.decode() for m in got]
    except BrokerUnavailable:
        return None
    return collections.Counter(bodies)


def test_a_master_kill_under_the_real_5x_producer_and_simple_consumer(tmp_path):
    """The issue's failover on gRPC v2: the real 5.x Producer sends in a loop (sending again what
    raised; at most 20 messages/s) and a SimpleConsumer receives and acks concurrently, both
    given every endpoint; the master is SIGKILLed KILL_AFTER_S into the sending. The producer
    resumes through the new master once its route is refreshed (within RESUME_BOUND_S); every
    message answered SEND_OK is consumed at least once; a message id is delivered again only
    after an ack of it failed (the acks that the old master answered went through the log), and
    a body is stored twice only when its send was repeated; the killed node restarts on its own
    store and catches up with the new master."""
    (tmp_path / "home").mkdir()
    brokers = {}
    procs, ports = start(tmp_path, brokers)
    python, env = client_python("grpc"), client_env(tmp_path / "home")
    consumer = producer = None
    try:
        master = master_port(ports["n0"])
        dead = next(i for i, p in ports.items() if p == master)
        endpoints = ";".join(f"127.0.0.1:{p}" for p in ports.values())
        consumed, sent = [], []
        consumer = subprocess.Popen([python, str(SCRIPT), "consume-acking", endpoints, "FO", "G-fo",
                                     str(FAILOVER_MESSAGES), "10", "40"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        reader = _lines(consumer, consumed)
        producer = subprocess.Popen([python, str(SCRIPT), "produce-retrying", endpoints, "FO",
                                     str(FAILOVER_MESSAGES), "120"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        killed_at = resumed_at = None
        started = time.monotonic()
        for line in producer.stdout:
            event = json.loads(line)
            if "sent" not in event:
                continue
            sent.append(event)
            if killed_at is not None and resumed_at is None and event["status"] == 0:
                resumed_at = time.monotonic()
            if killed_at is None and time.monotonic() - started >= KILL_AFTER_S:
                procs[dead].send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                kill_at = len(sent)
        assert producer.wait(60) == 0, producer.stderr.read().decode()[-3000:]
        ok = [s for s in sent if s["status"] == 0]
        assert len(ok) == FAILOVER_MESSAGES, [s for s in sent if s["status"] != 0][:3]
        assert killed_at is not None and kill_at < FAILOVER_MESSAGES, "the producer ended before the kill"
        resume_s = resumed_at - killed_at
        assert resume_s <= RESUME_BOUND_S, resume_s
        survivor = next(p for i, p in ports.items() if i != dead)
        new_master = master_port(survivor, deadline_s=60, not_port=master)
        new = next(i for i, p in ports.items() if p == new_master)

        assert consumer.wait(400) == 0, consumer.stderr.read().decode()[-3000:]
        reader.join(10)
        assert consumed and consumed[-1].get("done") is not None, consumer.stderr.read().decode()[-3000:]
        received = [e for e in consumed if "received" in e]
        ids = collections.Counter(e["message_id"] for e in received)
        missing = [s for s in ok if s["message_id"] not in ids]
        assert not missing, (len(missing), missing[:3])
        failed_acks = collections.Counter(e["acked"] for e in consumed if e.get("acked") and e["ok"] is False)
        assert all(n <= 1 + failed_acks[i] for i, n in ids.items()), \
            [(i, n, failed_acks[i]) for i, n in ids.items() if n > 1 + failed_acks[i]]
        bodies = collections.Counter(e["received"] for e in received)
        resent = sum(s["attempts"] - 1 for s in ok)
        stored_twice = len(ids) - len(bodies)
        assert stored_twice <= resent, (stored_twice, resent)
        duplicates = len(received) - len(bodies)
        print(f"\nmaster {dead} killed at message {kill_at}, new master {new}; the producer's next "
              f"SEND_OK {resume_s:.1f} s later; {len(ok)} SEND_OK, {resent} sends repeated, {len(received)} "
              f"received, {duplicates} duplicates ({sum(ids.values()) - len(ids)} deliveries again, "
              f"{sum(failed_acks.values())} acks failed; {stored_twice} bodies stored twice)")

        # the killed node restarts on its own store and catches up with the new master
        held = _queue_bodies(brokers[new][1], "FO")
        assert held is not None and set(held) >= {f"failover-{i}" for i in range(FAILOVER_MESSAGES)}
        restarted_at = time.monotonic()
        procs[dead] = spawn(tmp_path, dead, brokers[dead][0])
        deadline = restarted_at + 90
        while (caught := _queue_bodies(brokers[dead][1], "FO")) != held:
            assert time.monotonic() < deadline, (dead, caught and sum(caught.values()), sum(held.values()))
            time.sleep(0.5)
        print(f"{dead} restarted and caught up ({sum(held.values())} messages) in "
              f"{time.monotonic() - restarted_at:.1f} s")
    finally:
        for p in (consumer, producer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
        stop(procs)
