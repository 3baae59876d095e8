"""The gRPC v2 endpoint's server: a ``grpc.aio`` server on its own thread and event loop.

``GrpcEndpoint(commit_log, host, port, self_id=..., grpc_endpoints=...)`` serves
``MessagingService`` on ``host:port`` (port 0: a free one, read back from ``port`` after
``start()``). ``grpc_endpoints`` maps every node id of the group to its broker's gRPC
``host:port`` (the routes point at the master's); without it, the node's own endpoint is the
only one known, fine for a single broker. ``start()`` raises ``OSError`` when the port cannot be
bound; ``close()`` stops the server (in-flight calls get a second to end) and the thread.
No TLS and no authentication: run it on a trusted network, as the broker port.

The handlers are registered here rather than with the generated ``add_..._to_server``, so that
a request whose bytes are not the RPC's message is answered with the gRPC status
INVALID_ARGUMENT naming the type (the generated registration lets the decode error escape as
UNKNOWN).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import grpc

from dledger.broker.grpc_v2.rocketmq_v2 import service_pb2 as spb
from dledger.broker.grpc_v2.routes import Routes
from dledger.broker.grpc_v2.service import MessagingService

log = logging.getLogger(__name__)

DEFAULT_PORT = 8081          # RocketMQ proxy's gRPC port
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


SERVICE = "apache.rocketmq.v2.MessagingService"


class _Malformed:
    """A request that did not decode (the handler answers INVALID_ARGUMENT)."""

    def __init__(self, type_name: str, exc: Exception) -> None:
        self.detail = f"request: not a valid {type_name} ({exc})"


def _parser(cls):
    def parse(data: bytes):
        try:
            return cls.FromString(data)
        except Exception as exc:  # noqa: BLE001 - any undecodable request is answered, not raised
            return _Malformed(cls.__name__, exc)
    return parse


def _unary(fn):
    async def handler(request, context):
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
        return await fn(request, context)
    return handler


def _server_stream(fn):
    async def handler(request, context):
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
        async for response in fn(request, context):
            yield response
    return handler


def _bidi(fn):
    async def handler(requests, context):
        async def checked():
            async for request in requests:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
                yield request
        async for response in fn(checked(), context):
            yield response
    return handler


def add_service(service, server) -> None:
    """Register every RPC of ``MessagingService`` on ``server`` (a ``grpc.aio`` server)."""
    handlers = {}
    for method in spb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        fn = getattr(service, method.name)
        kw = {"request_deserializer": _parser(getattr(spb, method.input_type.name)),
              "response_serializer": getattr(spb, method.output_type.name).SerializeToString}
        if method.client_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(_bidi(fn), **kw)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(_server_stream(fn), **kw)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(_unary(fn), **kw)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


class GrpcEndpoint:
    def __init__(self, commit_log, host: str, port: int, *, self_id: str | None = None,
                 grpc_endpoints: dict[str, str] | None = None, broker_name: str | None = None,
                 advertised_host: str | None = None) -> None:
        self.log = commit_log
        self.host, self.port = host, port
        self.self_id = self_id or commit_log.server.config.self_id
        self._endpoints = dict(grpc_endpoints or {})
        self._advertised = advertised_host or host
        self.broker_name = broker_name or commit_log.server.config.group
        self.service: MessagingService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "GrpcEndpoint":
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        async def serve() -> None:
            server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                              ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                              ("grpc.so_reuseport", 0)])
            try:
                port = server.add_insecure_port(f"{self.host}:{self.port}")
            except RuntimeError as exc:
                raise OSError(f"cannot bind {self.host}:{self.port}: {exc}") from None
            if port == 0:
                raise OSError(f"cannot bind {self.host}:{self.port}")
            self.port = port
            endpoints = dict(self._endpoints)
            endpoints.setdefault(self.self_id, f"{self._advertised}:{port}")
            srv = self.log.server
            routes = Routes(self.log, self.self_id, endpoints, lambda: srv.leader_id, broker_name=self.broker_name)
            self.service = MessagingService(self.log, routes)
            self.service.pop.start(asyncio.get_running_loop())
            add_service(self.service, server)
            await server.start()
            self._server = server

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as exc:  # noqa: BLE001 - handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="grpc-v2-endpoint", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join(5)
            self._thread = None
            raise failure[0]
        return self

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or self._thread is None:
            return
        server = self._server
        if self.service is not None:
            self.service.pop.stop()

        async def stop() -> None:
            if server is not None:
                await server.stop(1.0)

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        except Exception:  # noqa: BLE001 - closing goes on
            log.exception("stopping the gRPC server failed")
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._thread = None


__all__ = ["DEFAULT_PORT", "SERVICE", "GrpcEndpoint", "add_service"]
