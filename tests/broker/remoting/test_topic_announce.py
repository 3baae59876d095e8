"""A send that creates a topic tells the name servers at once (as RocketMQ's broker registers
when it creates a topic), not at the next periodic registration: a producer that asks the name
server for the route right after its first send finds it."""

import time

from dledger.broker.remoting import codes
from dledger.broker.remoting.server import RemotingServer
from dledger.namesrv import NameServer

from helpers.polling import poll
from broker.remoting.remoting_client import RemotingClient

from .test_remoting_server import send


def test_a_new_topic_is_announced_to_the_name_server_at_once(remoting_group):
    namesrv = NameServer("127.0.0.1", 0).start()
    master = remoting_group.logs[remoting_group.master()]
    server = RemotingServer(master, "127.0.0.1", 0, broker_name="broker-a", namesrvs=[namesrv.address],
                            register_interval=3600.0, put_timeout=5.0).start()   # no periodic refresh here
    try:
        with RemotingClient(namesrv.address) as ns, RemotingClient(server.address) as c:
            poll(lambda: server.registrar.registered, what="the first registration")
            assert "FreshTopic" not in server.registrar.announced
            assert send(c, topic="FreshTopic").code == codes.SUCCESS
            start = time.monotonic()
            poll(lambda: "FreshTopic" in server.registrar.announced, timeout=10, what="the topic announced")
            answer, route = ns.json(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "FreshTopic"})
            assert answer.code == codes.SUCCESS
            assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a"]
            assert time.monotonic() - start < 10        # not the interval (an hour here)
    finally:
        server.close()
        namesrv.close()
