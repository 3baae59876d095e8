"""The name server: where RocketMQ clients find a topic's brokers (``dledger namesrv``).

It answers GET_ROUTEINFO_BY_TOPIC (105) from what brokers register with REGISTER_BROKER (103)
(``broker.remoting.registration``: every 30 s, and at once when a broker's role changes). Per
broker name it keeps one address per broker id: a registration with id 0 (the node leads)
replaces the previous id-0 address, and an address registered under a new id leaves its old
one, so clients asking after a failover find the new master. A registration not refreshed
within ``expire_s`` (RocketMQ's 120 s) is dropped. A route lists every broker name with a live
registration, each with the topic's queue count that broker registered (its
``defaultQueueNums`` for a topic it has no messages of yet: topics are auto-created on first
send); a topic name no topic may have, the consumer-state system topic, or no live broker
answer TOPIC_NOT_EXIST (17). Other request codes answer REQUEST_CODE_NOT_SUPPORTED (3). Nothing is
stored: a restarted name server learns everything again within one registration interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from dledger.broker.remoting import codes
from dledger.broker.remoting.command import MAX_FRAME_BYTES, RemotingCommand
from dledger.broker.remoting.connection import serve_connection
from dledger.broker.remoting.fields import BadField, integer, json_body, text
from dledger.broker.remoting.routes import DEFAULT_CLUSTER, route_data, topic_refused
from dledger.broker.topics import DEFAULT_QUEUES

log = logging.getLogger(__name__)

DEFAULT_PORT = 9876
EXPIRE_S = 120.0
MAX_CONNECTIONS = 1024


class RouteTable:
    """Broker registrations and the routes made of them (no I/O; ``clock`` in seconds)."""

    def __init__(self, expire_s: float = EXPIRE_S, clock=time.monotonic) -> None:
        self.expire_s, self.clock = expire_s, clock
        #: broker name -> {"cluster", "addrs": {id: (address, last seen)}, "topics": {topic: n}, "default": n}
        self.brokers: dict[str, dict] = {}

    def register(self, name: str, cluster: str, address: str, broker_id: int, topics: dict[str, int],
                 default_queues: int) -> None:
        entry = self.brokers.setdefault(name, {"cluster": cluster, "addrs": {}, "topics": {}, "default": default_queues})
        addrs = entry["addrs"]
        for old_id in [i for i, (a, _seen) in addrs.items() if a == address and i != broker_id]:
            del addrs[old_id]                   # the broker changed role
        addrs[broker_id] = (address, self.clock())
        entry.update(cluster=cluster, default=default_queues)
        if topics:
            entry["topics"].update(topics)

    def _expire(self) -> None:
        limit = self.clock() - self.expire_s
        for name in list(self.brokers):
            addrs = self.brokers[name]["addrs"]
            for i in [i for i, (_a, seen) in addrs.items() if seen < limit]:
                del addrs[i]
            if not addrs:
                del self.brokers[name]

    def route(self, topic: str) -> dict | None:
        self._expire()
        if not self.brokers:
            return None
        return route_data([(name, e["cluster"], {i: a for i, (a, _s) in e["addrs"].items()},
                            e["topics"].get(topic, e["default"])) for name, e in sorted(self.brokers.items())])


def _registration(cmd: RemotingCommand) -> tuple:
    ext = cmd.ext
    name, address = text(ext, "brokerName"), text(ext, "brokerAddr")
    cluster = text(ext, "clusterName", default=DEFAULT_CLUSTER)
    broker_id = integer(ext, "brokerId", lo=0)
    topics, default = {}, DEFAULT_QUEUES
    if cmd.body:
        body = json_body(cmd.body, "register")
        if not isinstance(body, dict):
            raise BadField("register: the body must be a JSON object")
        table = (body.get("topicConfigSerializeWrapper") or {}).get("topicConfigTable") or {}
        if not isinstance(table, dict):
            raise BadField("register: topicConfigTable must be an object")
        for topic, conf in table.items():
            n = conf.get("writeQueueNums") if isinstance(conf, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                topics[topic] = n
        d = body.get("defaultQueueNums")
        if isinstance(d, int) and not isinstance(d, bool) and d > 0:
            default = d
    return name, cluster, address, broker_id, topics, default


class NameServer:
    """``NameServer(host, port).start()`` serves on a thread of its own until ``close()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, expire_s: float = EXPIRE_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.host, self.port = host, port
        self.table = RouteTable(expire_s)
        self.max_connections = max_connections
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def dispatch(self, cmd: RemotingCommand) -> RemotingCommand:
        try:
            if cmd.code == codes.REGISTER_BROKER:
                name, cluster, address, broker_id, topics, default = _registration(cmd)
                self.table.register(name, cluster, address, broker_id, topics, default)
                return cmd.reply(codes.SUCCESS, None, {"haServerAddr": "", "masterAddr": ""})
            if cmd.code == codes.GET_ROUTEINFO_BY_TOPIC:
                topic = text(cmd.ext, "topic")
                why = topic_refused(topic)
                route = None if why else self.table.route(topic)
                if route is None:
                    return cmd.reply(codes.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: "
                                                            f"{topic[:80]}{f' ({why})' if why else ''}")
                return cmd.reply(codes.SUCCESS, body=json.dumps(route).encode())
            return cmd.reply(codes.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} is not supported")
        except BadField as exc:
            return cmd.reply(codes.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - a request never takes the name server down
            log.exception("name server request %d failed", cmd.code)
            return cmd.reply(codes.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    async def _serve(self, reader, writer) -> None:
        if self.connections >= self.max_connections:
            writer.close()
            return
        self.connections += 1
        try:
            await serve_connection(reader, writer, self.dispatch, max_frame_bytes=MAX_FRAME_BYTES)
        finally:
            self.connections -= 1

    def start(self) -> "NameServer":
        loop = asyncio.new_event_loop()
        opened: list = []
        ready = threading.Event()

        async def open_() -> None:
            self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(open_())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                opened.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="namesrv", daemon=True)
        self._thread.start()
        ready.wait()
        if opened:
            self._thread.join(5)
            self._loop = None
            raise opened[0]
        return self

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def stop() -> None:
            self._server.close()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            if rest:
                await asyncio.wait(rest, timeout=2)

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        except Exception:  # noqa: BLE001 - stopping anyway
            log.exception("stopping the name server")
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(5)


__all__ = ["DEFAULT_PORT", "EXPIRE_S", "NameServer", "RouteTable"]
