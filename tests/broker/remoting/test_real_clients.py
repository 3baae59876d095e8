"""The real RocketMQ 4.x client (PyPI ``rocketmq`` 0.4.4: the C++ client 1.0.1, written by
others) against three ``dledger broker`` processes over TCP and a ``dledger namesrv``: a producer
sends over several topics and queues with tags, keys and a user property, every send SEND_OK
with an offset; a pull consumer reads every queue to its end and gets every message as sent; a
push consumer in a new group receives all and commits; a second consumer of the group, started
later, resumes from the committed offsets, on a slave too. Each client runs as a subprocess in
its own virtualenv, HOME in the test's directory."""

import collections
import time

from dledger.broker.remoting import codes

from broker.remoting.remoting_client import RemotingClient
from broker.remoting.rmq_cluster import IDS, Cluster, run_client
from helpers.client_venvs import client_env, client_python

MESSAGES = 1000
TOPICS = ["TopicA", "TopicB", "TopicC"]
FIELDS = ("topic", "body", "tags", "keys", "color")


def test_producer_pull_and_push_consumers_of_the_real_client(tmp_path):
    python = client_python("remoting")
    env = client_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    cluster = Cluster(tmp_path).start()
    try:
        master = cluster.master()
        t0 = time.monotonic()
        sent = run_client(python, env, "produce", cluster.namesrv, MESSAGES, ",".join(TOPICS))
        produce_s = time.monotonic() - t0
        assert len(sent) == MESSAGES and all(s["status"] == 0 for s in sent)          # SEND_OK
        assert all(s["offset"] >= 0 for s in sent) and len({s["msg_id"] for s in sent}) == MESSAGES
        by_id = {s["msg_id"]: s for s in sent}
        per_queue = collections.Counter((s["topic"], s["offset"]) for s in sent)

        cluster.wait_dispatched(master, collections.Counter(s["topic"] for s in sent))
        t0 = time.monotonic()
        pulled = run_client(python, env, "pull", cluster.namesrv, "pull-group", ",".join(TOPICS))
        pull_s = time.monotonic() - t0
        assert pulled[-1] == {"done": MESSAGES}
        got = pulled[:-1]
        assert sorted(m["id"] for m in got) == sorted(by_id)                   # every message, once
        for m in got:
            assert {f: m[f] for f in FIELDS} == {f: by_id[m["id"]][f] for f in FIELDS}, m
        queues = {(m["topic"], m["queue_id"]) for m in got}
        assert len(queues) == len(TOPICS) * 4                                  # several queues per topic
        assert max(per_queue.values()) > 1

        expect_a = sum(1 for s in sent if s["topic"] == "TopicA")
        t0 = time.monotonic()
        pushed = run_client(python, env, "push", cluster.namesrv, "push-group", "TopicA", expect_a, 120)
        push_s = time.monotonic() - t0
        assert pushed[-1] == {"done": expect_a}
        assert sorted(m["id"] for m in pushed[:-1]) == sorted(s["msg_id"] for s in sent if s["topic"] == "TopicA")

        # the commits went through the log: every replica answers them
        ends = {}
        with RemotingClient(cluster.remoting[master]) as c:
            for q in range(4):
                ends[q] = int(c.call(codes.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": q}).ext["offset"])
        for node in IDS:
            with RemotingClient(cluster.remoting[node]) as c:
                for q in range(4):
                    ext = {"consumerGroup": "push-group", "topic": "TopicA", "queueId": q}
                    assert int(c.call(codes.QUERY_CONSUMER_OFFSET, ext).ext["offset"]) == ends[q], (node, q)

        more = run_client(python, env, "produce", cluster.namesrv, 30, "TopicA")
        assert all(s["status"] == 0 for s in more)
        again = run_client(python, env, "push", cluster.namesrv, "push-group", "TopicA", 30, 120)
        assert again[-1] == {"done": 30}                                       # resumed: only the new ones
        assert sorted(m["id"] for m in again[:-1]) == sorted(s["msg_id"] for s in more)
        print(f"\n{MESSAGES} messages: produce {produce_s:.1f} s, pull {pull_s:.1f} s, "
              f"push {push_s:.1f} s (6 s of it waiting for the offset commit)")
    finally:
        exits = cluster.stop()
    assert all(code == 0 for code in exits.values()), exits


def test_brokers_answer_routes_themselves_so_clients_need_no_name_server(tmp_path):
    python = client_python("remoting")
    env = client_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    cluster = Cluster(tmp_path)
    for node in IDS:                        # no name server process this time
        cluster.start_broker(node, register=False)
    try:
        addresses = ";".join(cluster.remoting.values())
        master = cluster.master(via=cluster.remoting["n0"])
        for node in IDS:                    # every broker names the master
            assert cluster.master(via=cluster.remoting[node]) == master
        sent = run_client(python, env, "produce", addresses, 20, "Direct")
        assert all(s["status"] == 0 for s in sent)
        cluster.wait_dispatched(master, {"Direct": 20})
        pulled = run_client(python, env, "pull", addresses, "direct-group", "Direct")
        assert pulled[-1] == {"done": 20}
        assert sorted(m["id"] for m in pulled[:-1]) == sorted(s["msg_id"] for s in sent)
    finally:
        exits = cluster.stop()
    assert all(code == 0 for code in exits.values()), exits
