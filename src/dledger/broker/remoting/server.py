"""The remoting server: RocketMQ's broker protocol on a ``DLedgerCommitLog``, on its own thread.

An asyncio loop on a thread of its own accepts connections (at most ``max_connections`` at
once: one more is closed at once) and serves each (``connection``: every request a task of its
own, so a held pull does not stop the requests behind it). Blocking reads of the store run on a
few worker threads. A send needs no task: ``start_send`` checks it and hands its put to the
commit log, and the answer is written when the put's answer reaches this loop; the node's
runtime thread hands answers over in runs, one wake-up of this loop per run (``loop_handoff``).
Served codes: send 10/310/320 (``send``), pull 11 (``pull``), offsets 14/15/29/30/31
(``offsets``), consumers 34/35/38 (``groups``), routes 105 (``routes``); anything else is
answered REQUEST_CODE_NOT_SUPPORTED (3) with a remark naming the code.

Bad input never takes the server down (bad frames: ``connection``): a missing or bad field is answered with its code and a remark naming the field; anything unexpected is a
SYSTEM_ERROR naming the exception (and logged). A broker role change (watched every
``ROLE_POLL_S``) publishes the new master's address and re-registers with the name servers.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from dledger.broker.loop_handoff import Handoff
from dledger.broker.remoting import codes
from dledger.broker.remoting.command import MAX_FRAME_BYTES, RemotingCommand
from dledger.broker.remoting.connection import IDLE_S, serve_connection
from dledger.broker.remoting.fields import BadField
from dledger.broker.remoting.groups import ConsumerGroups, handle_groups
from dledger.broker.remoting.offsets import handle_offsets
from dledger.broker.remoting.pull import PullHolds, handle_pull
from dledger.broker.remoting.registration import Registrar
from dledger.broker.remoting.routes import DEFAULT_CLUSTER, BrokerAddresses, handle_route
from dledger.broker.remoting.send import handle_send, start_send
from dledger.broker.topics import DEFAULT_QUEUES

log = logging.getLogger(__name__)

DEFAULT_PORT = 10911
MAX_CONNECTIONS = 1024
PUT_TIMEOUT_S = 10.0
SEND_CODES = frozenset({codes.SEND_MESSAGE, codes.SEND_MESSAGE_V2, codes.SEND_BATCH_MESSAGE})
ROLE_POLL_S = 0.1


class RemotingContext:
    """What the handlers share: the commit log, the broker's names and settings, its tables."""

    def __init__(self, commit_log, loop, executor, *, broker_name: str, cluster: str, address: str,
                 default_queues: int, put_timeout: float) -> None:
        self.log = commit_log
        self.loop, self.executor = loop, executor
        self.broker_name, self.cluster, self.address = broker_name, cluster, address
        self.default_queues, self.put_timeout = default_queues, put_timeout
        self.groups = ConsumerGroups()
        self.holds = PullHolds(commit_log, self.blocking)
        cfg = commit_log.server.config
        self.addresses = BrokerAddresses(commit_log, cfg.self_id, address, list(cfg.peer_map))
        #: the registrations with the name servers (None: no name server given)
        self.registrar = None
        self._rr = itertools.count()
        #: put answers handed from the node's runtime thread to this loop
        self.handoff = Handoff()

    def blocking(self, fn, *args):
        """``fn(*args)`` on a worker thread, awaited."""
        return self.loop.run_in_executor(self.executor, functools.partial(fn, *args))

    async def put(self, future):
        """A put's result, or None when it is not answered within the put timeout."""
        try:
            return await self.handoff.result(future, self.put_timeout)
        except TimeoutError:
            return None

    def next_queue(self, _topic: str, queues: int) -> int:
        return next(self._rr) % queues


def _peer_text(peer) -> str:
    """A client's address as a born host: ``a.b.c.d:port`` or ``[v6]:port``."""
    if not isinstance(peer, tuple) or len(peer) < 2:
        return "127.0.0.1:0"
    return f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"


class RemotingServer:
    """``RemotingServer(commit_log, host, port, ...).start()`` serves until ``close()``."""

    def __init__(self, commit_log, host: str, port: int = DEFAULT_PORT, *, broker_name: str,
                 cluster: str = DEFAULT_CLUSTER, namesrvs: list[str] | None = None,
                 default_queues: int = DEFAULT_QUEUES, put_timeout: float = PUT_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, max_frame_bytes: int = MAX_FRAME_BYTES,
                 register_interval: float | None = None, idle_s: float = IDLE_S) -> None:
        self.commit_log = commit_log
        self.host, self.port = host, port
        self.broker_name, self.cluster = broker_name, cluster
        self.namesrvs = list(namesrvs or [])
        self.default_queues, self.put_timeout = default_queues, put_timeout
        self.max_connections, self.max_frame_bytes = max_connections, max_frame_bytes
        self.register_interval = register_interval
        self.idle_s = idle_s
        self.connections = 0
        self.refused_connections = 0
        self.ctx: RemotingContext | None = None
        self.registrar: Registrar | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None
        self._tasks: list[asyncio.Task] = []
        self._executor = ThreadPoolExecutor(4, thread_name_prefix="remoting-io")
        self._conn_ids = itertools.count(1)
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "RemotingServer":
        loop = asyncio.new_event_loop()
        ready: list = []
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open())
                ready.append(None)
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                ready.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="remoting-server", daemon=True)
        self._thread.start()
        started.wait()
        if ready and ready[0] is not None:
            self._thread.join(5)
            raise ready[0]
        return self

    async def _open(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  reuse_address=True, limit=1 << 16)
        self.port = self._server.sockets[0].getsockname()[1]
        self.ctx = RemotingContext(self.commit_log, asyncio.get_running_loop(), self._executor,
                                   broker_name=self.broker_name, cluster=self.cluster, address=self.address,
                                   default_queues=self.default_queues, put_timeout=self.put_timeout)
        if self.namesrvs:
            self.registrar = Registrar(self.ctx, self.namesrvs, *(() if self.register_interval is None
                                                                  else (self.register_interval,)))
            self.ctx.registrar = self.registrar
            self._tasks.append(asyncio.ensure_future(self.registrar.run()))
        self._tasks.append(asyncio.ensure_future(self._watch_role()))

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return
        self._loop = None

        async def stop() -> None:
            for t in self._tasks:
                t.cancel()
            if self._server is not None:
                self._server.close()
            for w in self._conns.values():      # each connection's reader ends; its requests are cancelled
                w.close()
            if self._conns:
                await asyncio.wait(list(self._conns), timeout=2)
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:                      # the pull-hold checker, a registration under way
                t.cancel()
            if rest:
                await asyncio.wait(rest, timeout=2)

        if loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
            except Exception:  # noqa: BLE001 - closing anyway
                log.exception("stopping the remoting server")
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- role changes -------------------------------------------------------------------------
    async def _watch_role(self) -> None:
        roles, seen = self.commit_log.roles, None
        while True:
            now = (roles.role, roles.term, roles.leader_id)
            if now != seen:
                seen = now
                if roles.writable:
                    try:
                        await self.ctx.put(self.ctx.addresses.publish())
                    except Exception:  # noqa: BLE001 - published again at the next change
                        log.exception("publishing the broker address")
                if self.registrar is not None:
                    self.registrar.kick()
            await asyncio.sleep(ROLE_POLL_S)

    # -- connections --------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connections >= self.max_connections:
            self.refused_connections += 1
            writer.close()
            return
        self.connections += 1
        self._conns[asyncio.current_task()] = writer
        conn_id = next(self._conn_ids)
        peer_text = _peer_text(writer.get_extra_info("peername"))
        try:
            await serve_connection(reader, writer, lambda cmd: self.dispatch(cmd, conn_id, peer_text),
                                   max_frame_bytes=self.max_frame_bytes, idle_s=self.idle_s,
                                   start=lambda cmd, respond: self.start_send(cmd, respond, peer_text))
        finally:
            self.connections -= 1
            self._conns.pop(asyncio.current_task(), None)
            self.ctx.groups.connection_closed(conn_id)

    def start_send(self, cmd: RemotingCommand, respond, peer: str = "127.0.0.1:0") -> bool:
        """A send served without a task: checked, its put handed to the commit log, and
        ``respond(answer)`` called on this loop when the put is answered (or the put timeout
        passes). False for any other request (``dispatch`` serves it)."""
        if cmd.code not in SEND_CODES:
            return False
        ctx = self.ctx
        try:
            future, finish = start_send(ctx, cmd, peer)
        except BadField as exc:
            respond(cmd.reply(exc.code if exc.code is not None else codes.SYSTEM_ERROR, str(exc)))
            return True
        except Exception as exc:  # noqa: BLE001 - a request never takes the broker down
            respond(self._failed(cmd, exc))
            return True

        def answered(done) -> None:
            try:
                respond(finish(None if done is None else done.result()))
            except Exception as exc:  # noqa: BLE001
                respond(self._failed(cmd, exc))

        ctx.handoff.when_done(future, ctx.put_timeout, answered)
        return True

    @staticmethod
    def _failed(cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        log.error("remoting request %d failed", cmd.code, exc_info=exc)
        return cmd.reply(codes.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    async def dispatch(self, cmd: RemotingCommand, conn_id: int = 0, peer: str = "127.0.0.1:0") -> RemotingCommand:
        """The answer to one request (never raises)."""
        ctx, code = self.ctx, cmd.code
        try:
            if code in SEND_CODES:
                return await handle_send(ctx, cmd, peer)
            if code == codes.PULL_MESSAGE:
                return await handle_pull(ctx, cmd)
            if code in (codes.QUERY_CONSUMER_OFFSET, codes.UPDATE_CONSUMER_OFFSET, codes.GET_MAX_OFFSET,
                        codes.GET_MIN_OFFSET, codes.SEARCH_OFFSET_BY_TIMESTAMP):
                return await handle_offsets(ctx, cmd)
            if code in (codes.HEART_BEAT, codes.UNREGISTER_CLIENT, codes.GET_CONSUMER_LIST_BY_GROUP):
                return await handle_groups(ctx, cmd, conn_id)
            if code == codes.GET_ROUTEINFO_BY_TOPIC:
                return await handle_route(ctx, cmd)
            return cmd.reply(codes.REQUEST_CODE_NOT_SUPPORTED, f"request code {code} is not supported")
        except BadField as exc:
            return cmd.reply(exc.code if exc.code is not None else codes.SYSTEM_ERROR, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a request never takes the broker down
            return self._failed(cmd, exc)


__all__ = ["DEFAULT_PORT", "MAX_CONNECTIONS", "RemotingContext", "RemotingServer"]
