"""A broker's registrations with the name servers: REGISTER_BROKER (103), on a timer and at once
on a role change.

The request's ext fields are ``RegisterBrokerRequestHeader``'s (``brokerName, brokerAddr,
clusterName, haServerAddr, brokerId``); ``brokerId`` is 0 while the broker's node leads and its
slave id otherwise, so a name server learns a new master as soon as the node is elected. The
body is JSON: ``{"topicConfigSerializeWrapper": {"topicConfigTable": {topic: {"topicName",
"readQueueNums", "writeQueueNums", "perm"}}}, "defaultQueueNums": n}`` (the topics this broker
has messages of, and the queue count of a topic it has none of yet). When a name server did
not take it (not listening yet, no answer within ``TIMEOUT_S``), all are tried again after
``RETRY_S``, the wait doubling up to the interval.
"""

from __future__ import annotations

import asyncio
import json
import logging

from dledger.broker.remoting import codes
from dledger.broker.remoting.command import CommandDecoder, RemotingCommand, decode_frame, encode
from dledger.broker.remoting.routes import PERM_READ_WRITE
from dledger.broker.topics import known_topics, queue_count

log = logging.getLogger(__name__)

INTERVAL_S = 30.0       # RocketMQ's registerNameServerPeriod
RETRY_S = 1.0           # after a failed registration: again in 1 s, doubling up to INTERVAL_S
TIMEOUT_S = 3.0


async def request(address: str, cmd: RemotingCommand, timeout: float = TIMEOUT_S) -> RemotingCommand:
    """Send one request to ``host:port`` on a new connection and read its answer."""
    host, _, port = address.rpartition(":")

    async def exchange() -> RemotingCommand:
        reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        try:
            writer.write(encode(cmd))
            await writer.drain()
            decoder = CommandDecoder()
            while True:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError(f"{address} closed the connection without an answer")
                for frame in decoder.feed(data):
                    answer = decode_frame(frame)
                    if answer.opaque == cmd.opaque:
                        return answer
        finally:
            writer.close()

    async with asyncio.timeout(timeout):
        return await exchange()


def registration_body(commit_log, default_queues: int, topics: list[str] | None = None) -> bytes:
    table = {}
    for topic in known_topics(commit_log) if topics is None else topics:
        n = queue_count(commit_log, topic, default_queues)
        table[topic] = {"topicName": topic, "readQueueNums": n, "writeQueueNums": n, "perm": PERM_READ_WRITE}
    return json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table},
                       "defaultQueueNums": default_queues}).encode()


class Registrar:
    """Registers with every name server every ``interval`` s, and at once when ``kick()``ed
    (a role change) or when a send creates a topic the name servers were not told of
    (``new_topic``, as RocketMQ's broker registers at once when it creates a topic)."""

    def __init__(self, ctx, namesrvs: list[str], interval: float = INTERVAL_S) -> None:
        self.ctx = ctx
        self.namesrvs = list(namesrvs)
        self.interval = interval
        self._kick = asyncio.Event()
        self._opaque = 0
        self.registered: dict[str, int] = {}       # name server -> the broker id it last took
        #: the topics the last registration named, and those sent to since that it did not
        self.announced: frozenset[str] = frozenset()
        self._new: set[str] = set()

    def kick(self) -> None:
        self._kick.set()

    def new_topic(self, topic: str) -> None:
        """A send to ``topic`` was stored: register at once if the name servers do not know it."""
        if topic not in self.announced:
            self._new.add(topic)          # named at once, before the dispatch has seen it
            self._kick.set()

    async def run(self) -> None:
        retry = RETRY_S
        while True:
            self._kick.clear()
            ok = await self.register_all()
            wait, retry = (self.interval, RETRY_S) if ok else (min(retry, self.interval), min(retry * 2, self.interval))
            try:
                async with asyncio.timeout(wait):
                    await self._kick.wait()
            except asyncio.TimeoutError:
                pass

    async def register_all(self) -> bool:
        """Register with every name server; whether all of them took it."""
        ctx = self.ctx
        try:
            new, self._new = self._new, set()
            topics = sorted(set(known_topics(ctx.log)) | new)
            body = await ctx.blocking(registration_body, ctx.log, ctx.default_queues, topics)
        except Exception:                       # noqa: BLE001 - the store is closing
            return False
        self.announced = frozenset(topics)
        broker_id = ctx.addresses.broker_id()
        ok = True
        for address in self.namesrvs:
            self._opaque += 1
            cmd = RemotingCommand(codes.REGISTER_BROKER, self._opaque, 0, None,
                                  {"brokerName": ctx.broker_name, "brokerAddr": ctx.address,
                                   "clusterName": ctx.cluster, "haServerAddr": ctx.address,
                                   "brokerId": str(broker_id)}, body)
            try:
                answer = await request(address, cmd)
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                log.warning("registering with the name server %s failed: %s", address, exc)
                ok = False
                continue
            if answer.code == codes.SUCCESS:
                self.registered[address] = broker_id
            else:
                log.warning("the name server %s refused the registration: %s", address, answer.remark)
                ok = False
        return ok


__all__ = ["INTERVAL_S", "RETRY_S", "Registrar", "registration_body", "request"]
