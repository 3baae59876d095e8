"""A small TCP fault proxy for real-process tests: it listens on a free loopback port and
forwards every connection to one target port, byte for byte, until told otherwise.

Controls (any thread, effective at once):
- ``cut()``: close every forwarded connection and refuse new ones (accepted, then closed at
  once: the sender sees its connection fail, as against a dead host that resets);
- ``blackhole()``: keep connections open but forward nothing either way (a silent link: only
  the idle timeouts of the ends notice it);
- ``delay(ms)``: forward each chunk after ``ms`` (0: none);
- ``heal()``: forward again (new connections; a cut does not revive the ones it closed).

Bounded: at most ``max_connections`` forwarded at once (more are closed at accept), each
socket operation times out, every thread polls ``closed`` and ``close()`` joins them.
Threads, not asyncio, so a synchronous test can drive it without an event loop.
"""

from __future__ import annotations

import select
import socket
import threading
import time

POLL_S = 0.05
IO_TIMEOUT_S = 5.0


class TcpProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1", max_connections: int = 32) -> None:
        self.target = (host, target_port)
        self.max_connections = max_connections
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(POLL_S)
        self.port = self._listener.getsockname()[1]
        self.mode = "pass"
        self.delay_s = 0.0
        self.closed = False
        self.accepted = 0
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop)

    # -- controls ---------------------------------------------------------------------------
    def cut(self) -> None:
        self.mode = "cut"
        self._close_all()

    def blackhole(self) -> None:
        self.mode = "blackhole"

    def delay(self, ms: int) -> None:
        self.delay_s = ms / 1000

    def heal(self) -> None:
        self.mode = "pass"
        self.delay_s = 0.0

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self.closed = True
        self._close_all()
        self._listener.close()
        for t in self._threads:
            t.join(IO_TIMEOUT_S)

    # -- the work ---------------------------------------------------------------------------
    def _start(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, _addr = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.mode == "cut" or self.connections >= self.max_connections:
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=IO_TIMEOUT_S)
            except OSError:
                conn.close()                    # the target is down: so is the link
                continue
            conn.settimeout(IO_TIMEOUT_S)
            pair = (conn, upstream)
            with self._lock:
                self._pairs.add(pair)
            self._start(self._pump, conn, upstream, pair)
            self._start(self._pump, upstream, conn, pair)

    def _pump(self, src: socket.socket, dst: socket.socket, pair) -> None:
        try:
            while not self.closed and pair in self._pairs:
                ready, _w, _x = select.select([src], [], [], POLL_S)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if self.mode == "blackhole":
                    continue
                if self.delay_s:
                    time.sleep(self.delay_s)    # the injected delay itself, not a wait for anything
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._close(pair)

    def _close(self, pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
        for s in pair:
            try:
                s.close()
            except OSError:
                pass

    def _close_all(self) -> None:
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._close(pair)


__all__ = ["TcpProxy"]
