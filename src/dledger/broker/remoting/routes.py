"""Topic routes: GET_ROUTEINFO_BY_TOPIC (105), answered by the broker itself or by the name server.

The answer's body is ``TopicRouteData`` as the clients read it::

    {"orderTopicConf": null,
     "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                     "topicSynFlag": 0}],
     "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                      "brokerAddrs": {"0": "127.0.0.1:10911", "2": "127.0.0.1:10912"}}],
     "filterServerTable": {}}

``brokerAddrs`` maps a broker id to its remoting address: 0 is the master (the node that leads
the group), a slave has ``1 + its index in the group's peers``. Every topic is served
(auto-created on first send, ``topics.queue_count`` queues: at least ``--default-queues``),
``TBW102`` and ``%RETRY%<group>`` included; the broker's own topics (``RMQ_SYS_...``, the
replicated consumer state among them) and names no topic may have answer TOPIC_NOT_EXIST (17).

A broker answering 105 itself needs the master's remoting address: each broker, on becoming
master, writes ``{"node", "addr"}`` through the Raft log (``consumer_state.submit_async``, kind
``remoting-broker``), and every replica keeps the table (``BrokerAddresses``), so any broker
of the group names the current master.
"""

from __future__ import annotations

import json

from dledger.broker.put_checks import topic_problem
from dledger.broker.remoting import codes
from dledger.broker.remoting.fields import text
from dledger.broker.topics import is_system_topic, queue_count

PERM_READ_WRITE = 6
ADDRESS_KIND = "remoting-broker"
DEFAULT_CLUSTER = "DefaultCluster"


def route_data(brokers) -> dict:
    """TopicRouteData of ``brokers``: ``(broker name, cluster, {broker id: address}, queues)``."""
    return {"orderTopicConf": None,
            "queueDatas": [{"brokerName": name, "readQueueNums": n, "writeQueueNums": n, "perm": PERM_READ_WRITE,
                            "topicSynFlag": 0} for name, _cluster, _addrs, n in brokers],
            "brokerDatas": [{"cluster": cluster, "brokerName": name,
                             "brokerAddrs": {str(i): a for i, a in sorted(addrs.items())}}
                            for name, cluster, addrs, _n in brokers],
            "filterServerTable": {}}


def topic_refused(topic: str) -> str | None:
    """Why no route is served for ``topic`` (None: it is served)."""
    if is_system_topic(topic):
        return f"{topic} is a system topic"
    return topic_problem(topic)


class BrokerAddresses:
    """Node id -> remoting address, as replicated through the log (every replica applies it)."""

    def __init__(self, log, self_id: str, own: str, peer_ids: list[str]) -> None:
        self.log = log
        self.self_id, self.own = self_id, own
        self.peer_ids = list(peer_ids)
        self.table: dict[str, str] = {self_id: own}
        log.consumer_state.subscribe(ADDRESS_KIND, self._apply)

    def _apply(self, record: dict) -> None:
        node, addr = record.get("node"), record.get("addr")
        if isinstance(node, str) and isinstance(addr, str) and node != self.self_id:
            self.table[node] = addr

    def publish(self):
        """Write this broker's address through the log (the master's call); a future."""
        return self.log.consumer_state.submit_async(ADDRESS_KIND, {"node": self.self_id, "addr": self.own})

    def slave_id(self, node: str) -> int:
        return 1 + (self.peer_ids.index(node) if node in self.peer_ids else len(self.peer_ids))

    def broker_id(self) -> int:
        """This broker's id now: 0 while its node leads, its slave id otherwise."""
        return 0 if self.log.roles.writable else self.slave_id(self.self_id)

    def addrs(self) -> dict[int, str]:
        """The brokerAddrs this broker knows: the master under 0 (when known), itself as a slave."""
        roles = self.log.roles
        if roles.writable:
            return {0: self.own}
        out = {self.slave_id(self.self_id): self.own}
        leader = roles.leader_id
        if leader is not None and leader in self.table:
            out[0] = self.table[leader]
        return out


async def handle_route(ctx, cmd):
    topic = text(cmd.ext, "topic")
    why = topic_refused(topic)
    if why:
        return cmd.reply(codes.TOPIC_NOT_EXIST, f"No topic route info for {topic[:80]!r}: {why}")
    n = queue_count(ctx.log, topic, ctx.default_queues)
    data = route_data([(ctx.broker_name, ctx.cluster, ctx.addresses.addrs(), n)])
    return cmd.reply(codes.SUCCESS, body=json.dumps(data).encode())


__all__ = ["ADDRESS_KIND", "DEFAULT_CLUSTER", "PERM_READ_WRITE", "BrokerAddresses", "handle_route", "route_data",
           "topic_refused"]
