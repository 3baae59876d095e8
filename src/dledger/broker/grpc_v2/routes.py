"""Routes, assignments and client settings of the gRPC v2 endpoint.

There is no name server in RocketMQ 5.x's gRPC protocol: the endpoint a client is given answers
``QueryRoute`` itself. Every broker of the group answers with the **current master's** gRPC
endpoint (the node that leads, looked up in the list of every broker's endpoint), so a client
given any one endpoint sends to the master and follows a failover at its next route refresh.
Each route holds the topic's ``queue_count`` queues (``dledger.broker.topics``), each
``READ_WRITE``, on broker ``id`` 0 (the clients drop any other), accepting NORMAL messages.

``QueryAssignment`` (push consumers) answers one assignment per topic on the master, with queue
id -1: "any queue", as RocketMQ's proxy does for POP consumption. A receive takes from every
queue of the topic whatever queue it names (as the proxy's, which pops by broker), beginning
with the one it names.

``settings(client)`` is the answer to the ``Settings`` a client sends on its Telemetry stream:
its own settings plus what the clients require: a backoff policy (exponential), a request
timeout, for producers ``publishing.max_body_size``, for consumers the subscription's receive
batch size and long-polling timeout.
"""

from __future__ import annotations

from dledger.broker.grpc_v2.rocketmq_v2 import definition_pb2 as pb
from dledger.broker.topics import queue_count

BROKER_NAME_DEFAULT = "dledger"
MAX_BODY_SIZE = 4 * 1024 * 1024          # RocketMQ's maxMessageSize
REQUEST_TIMEOUT_S = 3
LONG_POLLING_TIMEOUT_S = 20              # the proxy's default
RECEIVE_BATCH_SIZE = 32
PRODUCER_MAX_ATTEMPTS = 3
CONSUMER_MAX_ATTEMPTS = 16


def split_endpoint(text: str) -> tuple[str, int]:
    """``("host", port)`` of ``"host:port"`` (``ValueError`` naming the text if it is not one)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host.strip("[]"), int(port)


def endpoints(address: str) -> pb.Endpoints:
    host, port = split_endpoint(address)
    out = pb.Endpoints()
    out.scheme = pb.IPv6 if ":" in host else (pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME)
    a = out.addresses.add()
    a.host, a.port = host, port
    return out


class Routes:
    """What this broker tells clients about where to send and receive.

    ``grpc_endpoints`` maps every node id of the group to its broker's gRPC ``host:port``;
    ``leader()`` returns the current leader's node id (None when unknown)."""

    def __init__(self, log, self_id: str, grpc_endpoints: dict[str, str], leader, *,
                 broker_name: str = BROKER_NAME_DEFAULT, max_body_size: int = MAX_BODY_SIZE) -> None:
        for node, address in grpc_endpoints.items():
            split_endpoint(address)
        if self_id not in grpc_endpoints:
            raise ValueError(f"no gRPC endpoint for this node ({self_id})")
        self.log = log
        self.self_id = self_id
        self.grpc_endpoints = dict(grpc_endpoints)
        self.leader = leader
        self.broker_name = broker_name
        self.max_body_size = max_body_size

    def master_endpoint(self) -> str | None:
        """The gRPC endpoint of the current master (None when no leader is known)."""
        leader = self.leader()
        return None if leader is None else self.grpc_endpoints.get(leader)

    def _queue(self, topic: pb.Resource, queue_id: int, address: str) -> pb.MessageQueue:
        mq = pb.MessageQueue()
        mq.topic.CopyFrom(topic)
        mq.id = queue_id
        mq.permission = pb.READ_WRITE
        mq.broker.name = self.broker_name
        mq.broker.id = 0
        mq.broker.endpoints.CopyFrom(endpoints(address))
        mq.accept_message_types.append(pb.NORMAL)
        return mq

    def queue_count(self, topic: str) -> int:
        return queue_count(self.log, topic)

    def route(self, topic: pb.Resource) -> list[pb.MessageQueue] | None:
        """The topic's queues on the master (None when no master is known)."""
        address = self.master_endpoint()
        if address is None:
            return None
        return [self._queue(topic, q, address) for q in range(self.queue_count(topic.name))]

    def assignment(self, topic: pb.Resource) -> list[pb.MessageQueue] | None:
        address = self.master_endpoint()
        return None if address is None else [self._queue(topic, -1, address)]

    def settings(self, client: pb.Settings) -> pb.Settings:
        out = pb.Settings()
        out.CopyFrom(client)
        consumer = client.HasField("subscription")
        policy = out.backoff_policy
        policy.max_attempts = CONSUMER_MAX_ATTEMPTS if consumer else PRODUCER_MAX_ATTEMPTS
        policy.exponential_backoff.initial.FromMilliseconds(10 if not consumer else 1000)
        policy.exponential_backoff.max.FromMilliseconds(1000 if not consumer else 60_000)
        policy.exponential_backoff.multiplier = 2.0
        out.request_timeout.FromSeconds(REQUEST_TIMEOUT_S)
        if consumer:
            sub = out.subscription
            sub.fifo = False
            sub.receive_batch_size = RECEIVE_BATCH_SIZE
            sub.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
        else:
            out.publishing.max_body_size = self.max_body_size
            out.publishing.validate_message_type = True
        out.metric.on = False
        return out


__all__ = ["BROKER_NAME_DEFAULT", "LONG_POLLING_TIMEOUT_S", "MAX_BODY_SIZE", "Routes", "endpoints",
           "split_endpoint"]
