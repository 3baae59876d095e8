"""What one loopback round trip between two processes costs here: the floor under a hop.

    python benchmarks/bench_loopback_floor.py [--rate R] [--count N] [--size B] [--server KIND,...]

A server process echoes what it reads, over TCP on 127.0.0.1 (``TCP_NODELAY`` on both ends);
this process sends ``--size`` bytes and waits for them to come back, one message at a time,
``--rate`` messages a second (the sender sleeps between them, so each one finds the server
asleep, as an append at 1,000/s does), ``--count`` times, and prints the round trip's p50, p90
and p99. The servers:

- ``blocking``: a thread blocked in ``recv`` (the least work a Python process can do);
- ``asyncio``: an ``asyncio.Protocol`` on the default event loop (``data_received`` writes back:
  one turn of the loop per message, as the project's TCP transport reads frames);
- ``uvloop``: the same protocol on uvloop (only when it is installed).

An append made one at a time through ``AsyncDLedgerClient`` takes two such round trips in turn
(client to leader, leader to a follower), plus the turns of the nodes on the way: set the figures
of ``bench_tcp_cluster.py --via client --load rate`` against twice these (docs/benchmarks.md).

examples:

    python benchmarks/bench_loopback_floor.py
    python benchmarks/bench_loopback_floor.py --rate 2000 --count 10000 --server asyncio
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from _common import command, machine, print_table  # noqa: E402

SERVERS = ("blocking", "asyncio", "uvloop")


def _serve_blocking(sock: socket.socket) -> None:
    conn, _ = sock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(65536)
        if not data:
            return
        conn.sendall(data)


def _serve_async(sock: socket.socket, kind: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()

        class Echo(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                self.transport = transport
                transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def data_received(self, data: bytes) -> None:
                self.transport.write(data)

            def connection_lost(self, exc) -> None:
                if not closed.done():
                    closed.set_result(None)

        server = await loop.create_server(Echo, sock=sock)
        async with server:
            await closed

    if kind == "uvloop":
        import uvloop
        uvloop.run(main())
    else:
        asyncio.run(main())


def serve(kind: str) -> None:
    """The server process: prints its port, serves one connection, exits when it closes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    print(sock.getsockname()[1], flush=True)
    if kind == "blocking":
        _serve_blocking(sock)
    else:
        _serve_async(sock, kind)


def round_trips(conn: socket.socket, rate: float, count: int, size: int) -> list[float]:
    """``count`` round trips of ``size`` bytes at ``rate`` a second on ``conn``; their times, ms."""
    msg = b"x" * size
    out = []
    perf = time.perf_counter
    tick = perf()
    for _ in range(count):
        delay = tick - perf()
        if delay > 0:
            time.sleep(delay)
        tick += 1 / rate
        t = perf()
        conn.sendall(msg)
        got = 0
        while got < size:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("the echo server closed the connection")
            got += len(chunk)
        out.append((perf() - t) * 1000)
    return out


def measure(kind: str, rate: float, count: int, size: int) -> list[float]:
    """The round trips to a new ``kind`` server process, after a few hundred to warm both up."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            round_trips(conn, rate, min(200, count), size)
            return round_trips(conn, rate, count, size)
        finally:
            conn.close()
    finally:
        proc.wait(10)
        proc.stdout.close()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n  python benchmarks/bench_loopback_floor.py\n"
                                        "  python benchmarks/bench_loopback_floor.py --rate 2000 --count 10000 "
                                        "--server asyncio")
    ap.add_argument("--rate", type=float, default=1000.0, help="round trips a second (default 1000)")
    ap.add_argument("--count", type=int, default=5000, help="round trips per server (default 5000)")
    ap.add_argument("--size", type=int, default=200, help="bytes per message (default 200)")
    ap.add_argument("--server", default=",".join(SERVERS),
                    help=f"servers, comma-separated: {', '.join(SERVERS)} (default all; uvloop only if installed)")
    ap.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args.serve)
    kinds = [k.strip() for k in args.server.split(",") if k.strip()]
    bad = [k for k in kinds if k not in SERVERS]
    if bad or not kinds:
        ap.error(f"--server: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(SERVERS)}")
    for name, value in (("--rate", args.rate), ("--count", args.count), ("--size", args.size)):
        if not value > 0:
            ap.error(f"{name} must be above 0, got {value:g}")
    print(f"machine: {machine()}\ncommand: {command()}")
    rows = []
    for kind in kinds:
        if kind == "uvloop":
            try:
                import uvloop  # noqa: F401
            except ImportError:
                print("uvloop: not installed, skipped (pip install uvloop)")
                continue
        lat = measure(kind, args.rate, args.count, args.size)
        rows.append([kind, f"{len(lat):,}", f"{pct(lat, 0.5):.3f}", f"{pct(lat, 0.9):.3f}", f"{pct(lat, 0.99):.3f}"])
    print_table(f"one round trip of {args.size} B at {args.rate:,.0f}/s, one at a time",
                ["server", "round trips", "p50 ms", "p90 ms", "p99 ms"], rows)


if __name__ == "__main__":
    main()
