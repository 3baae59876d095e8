"""The name server: routes from broker registrations (a new master replaces the old id-0
address, stale registrations expire), served over TCP, and ``dledger namesrv`` as a process."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from dledger.broker.remoting import codes
from dledger.cli import main
from dledger.namesrv import NameServer, RouteTable
from dledger.transport.loopback import free_ports

from broker.remoting.remoting_client import RemotingClient

ROOT = pathlib.Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def addrs(route, name="broker-a"):
    return next(b["brokerAddrs"] for b in route["brokerDatas"] if b["brokerName"] == name)


def test_a_new_master_replaces_the_old_one_and_the_old_master_moves_to_its_slave_id():
    clock = Clock()
    t = RouteTable(expire_s=120, clock=clock)
    assert t.route("T") is None
    t.register("broker-a", "C", "h:1", 0, {"T": 8}, 4)
    t.register("broker-a", "C", "h:2", 2, {}, 4)
    route = t.route("T")
    assert addrs(route) == {"0": "h:1", "2": "h:2"}
    assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
                                    "topicSynFlag": 0}]
    assert t.route("Other")["queueDatas"][0]["writeQueueNums"] == 4        # auto-created: the default count
    t.register("broker-a", "C", "h:2", 0, {}, 4)       # h:2 was elected
    assert addrs(t.route("T")) == {"0": "h:2"}
    t.register("broker-a", "C", "h:1", 1, {}, 4)       # the old master came back as a slave
    assert addrs(t.route("T")) == {"0": "h:2", "1": "h:1"}


def test_registrations_not_refreshed_expire():
    clock = Clock()
    t = RouteTable(expire_s=120, clock=clock)
    t.register("broker-a", "C", "h:1", 0, {}, 4)
    clock.now += 100
    t.register("broker-b", "C", "h:9", 0, {}, 2)
    assert [b["brokerName"] for b in t.route("T")["brokerDatas"]] == ["broker-a", "broker-b"]
    clock.now += 30
    assert [b["brokerName"] for b in t.route("T")["brokerDatas"]] == ["broker-b"]
    clock.now += 200
    assert t.route("T") is None


def test_the_name_server_over_tcp():
    server = NameServer("127.0.0.1", 0).start()
    try:
        with RemotingClient(server.address) as c:
            none = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            assert none.code == codes.TOPIC_NOT_EXIST and "No topic route info" in none.remark
            body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {
                "T": {"topicName": "T", "readQueueNums": 6, "writeQueueNums": 6, "perm": 6}}},
                "defaultQueueNums": 3}).encode()
            reg = c.call(codes.REGISTER_BROKER, {"brokerName": "b", "brokerAddr": "127.0.0.1:10911",
                                                 "clusterName": "DefaultCluster", "brokerId": 0}, body,
                         serialize_type=codes.SERIALIZE_ROCKETMQ)
            assert reg.code == codes.SUCCESS and reg.serialize_type == codes.SERIALIZE_ROCKETMQ
            answer, route = c.json(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            assert answer.code == codes.SUCCESS and addrs(route, "b") == {"0": "127.0.0.1:10911"}
            assert route["queueDatas"][0]["writeQueueNums"] == 6
            assert c.json(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})[1]["queueDatas"][0]["writeQueueNums"] == 3
            for ext, body, words in [({"brokerName": "b"}, b"", "brokerAddr: is missing"),
                                     ({"brokerName": "b", "brokerAddr": "h:1", "brokerId": "x"}, b"", "brokerId"),
                                     ({"brokerName": "b", "brokerAddr": "h:1", "brokerId": 0}, b"[", "not JSON")]:
                bad = c.call(codes.REGISTER_BROKER, ext, body)
                assert bad.code == codes.SYSTEM_ERROR and words in bad.remark, bad
            sys_topic = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "RMQ_SYS_DLEDGER_CONSUMER_STATE"})
            assert sys_topic.code == codes.TOPIC_NOT_EXIST and "system topic" in sys_topic.remark
            assert c.call(10, {}).code == codes.REQUEST_CODE_NOT_SUPPORTED
    finally:
        server.close()


def test_dledger_namesrv_serves_and_exits_0_on_sigterm(tmp_path):
    port = free_ports(1)[0]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "dledger.cli", "namesrv", "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline().decode()
        assert f"serving routes on 127.0.0.1:{port}" in line
        with RemotingClient(f"127.0.0.1:{port}") as c:
            assert c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).code == codes.TOPIC_NOT_EXIST
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_the_namesrv_command_has_help_and_bad_flags_are_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["namesrv", "--help"])
    assert exc.value.code == 0 and "example:" in capsys.readouterr().out
    assert main(["namesrv", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--port: 70000" in err


@pytest.mark.parametrize("extra, words", [
    (["--namesrv", "127.0.0.1:9876"], "--namesrv needs --remoting-port"),
    (["--remoting-port", "0"], "--remoting-port: 0"),
    (["--remoting-port", "10911", "--default-queues", "0"], "--default-queues: 0"),
    (["--remoting-port", "10911", "--namesrv", "nohostport"], "--namesrv: 'nohostport'"),
])
def test_bad_remoting_flags_of_the_broker_are_one_line_and_exit_2(extra, words, capsys):
    argv = ["broker", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911", "--broker-port", "1", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err
