"""Loopback ports for clusters started on one machine (the main job, the benchmark, tests).

``free_ports(n)`` binds ``n`` sockets to port 0 on 127.0.0.1 at once (so the ports differ),
reads the ports the system chose and releases them: they are free at the time of the call, and
another process could still take one before the caller binds it, which a local cluster accepts.
"""

from __future__ import annotations

import socket


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


__all__ = ["free_ports"]
