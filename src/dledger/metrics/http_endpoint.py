"""The metrics port's HTTP server: ``/metrics``, ``/health`` and ``/ready``, nothing else.

A WSGI application on ``wsgiref``'s server, one daemon thread per request, itself served by a
daemon thread (as prometheus-client's ``start_http_server``, which answered every path with
the metrics, so a health check pointed at any path always passed):

- ``GET /metrics``: the registry in the Prometheus text format; prometheus-client's own WSGI
  application answers it, so OpenMetrics (``Accept``), gzip (``Accept-Encoding``) and
  ``name[]=`` filters behave as with ``start_http_server``;
- ``GET /health``: 200 ``live``, or 503 with the reason (``metrics.health.liveness``);
- ``GET /ready`` (``?group=NAME`` asks about one group): 200 with a line per node, or 503
  with the first reason (``metrics.health.readiness``); a group not served here: 404;
- any other path: 404; a method other than GET or HEAD: 405.
Bodies of ``/health`` and ``/ready`` are one line of text. Requests are not logged.
``close()`` stops accepting, waits for the serving thread and frees the port.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

#: ``check(query) -> (status, line)``: the answer of a health path
Check = Callable[[dict[str, list[str]]], tuple[int, str]]

_REASONS = {200: "200 OK", 404: "404 Not Found", 405: "405 Method Not Allowed", 503: "503 Service Unavailable"}


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True         # a request thread never holds the process up


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:   # noqa: A002 (the base class's name)
        """Requests are not logged."""


def _text(start_response, status: int, line: str, head: bool) -> list[bytes]:
    body = (line + "\n").encode()
    start_response(_REASONS[status], [("Content-Type", "text/plain; charset=utf-8"),
                                      ("Content-Length", str(len(body)))])
    return [] if head else [body]


def application(registry: CollectorRegistry, checks: dict[str, Check]):
    """The WSGI application: ``/metrics`` from ``registry``, each path of ``checks`` from its
    check, 404 for the rest."""
    metrics = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        head = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return _text(start_response, 405, f"{method} is not allowed: GET or HEAD", head)
        if path == "/metrics":
            body = metrics({**environ, "REQUEST_METHOD": "GET"}, start_response)
            return [] if head else body
        check = checks.get(path)
        if check is None:
            paths = ", ".join(["/metrics", *checks])
            return _text(start_response, 404, f"no such path {path!r}: {paths}", head)
        status, line = check(parse_qs(environ.get("QUERY_STRING", "")))
        return _text(start_response, status, line, head)

    return app


class HttpEndpoint:
    """``application(registry, checks)`` served on ``host:port`` by a daemon thread;
    ``OSError`` when it cannot listen there. ``port`` is the one listened on."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, checks: dict[str, Check]) -> None:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _type, _proto, _canon, sockaddr = infos[0]

        class Server(_Server):
            address_family = family

        self._httpd = make_server(sockaddr[0], port, application(registry, checks), Server,
                                  handler_class=_QuietHandler)
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"dledger-metrics-{self.port}",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


__all__ = ["HttpEndpoint", "application"]
