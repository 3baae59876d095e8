"""What grpcio alone costs a server per unary call: the floor under the broker's gRPC v2 endpoint.

    python benchmarks/bench_grpc_floor.py [--server aio|sync|both] [--processes K] [--threads T]
                                          [--calls N]

A server process answers one unary method that echoes its request (200 bytes, no protobuf:
the bytes as they come), as a ``grpc.aio`` server (the broker endpoint's kind) or a thread-pool
``grpc.server``; K client processes of T threads each make N blocking calls over one channel
per process. It prints calls/s and the server process's CPU time per call (``getrusage``,
all its threads, over the calls): what grpcio's own per-call work costs before any handler
does anything. Clients and server share the machine: compare the figures of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

from _common import command, machine, print_table  # noqa: E402

PAYLOAD = b"x" * 200


def cpu_seconds() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def serve(kind: str) -> None:
    """The server: prints its port, then the CPU seconds between a "go" and a "stop" line."""
    import grpc

    def handlers(fn):
        return grpc.method_handlers_generic_handler("Floor", {"Echo": grpc.unary_unary_rpc_method_handler(fn)})

    if kind == "sync":
        from concurrent.futures import ThreadPoolExecutor
        server = grpc.server(ThreadPoolExecutor(16))
        server.add_generic_rpc_handlers((handlers(lambda req, ctx: req),))
        print(server.add_insecure_port("127.0.0.1:0"), flush=True)
        server.start()
        sys.stdin.readline()
        c0 = cpu_seconds()
        sys.stdin.readline()
        print(cpu_seconds() - c0, flush=True)
        server.stop(0)
        return

    async def echo(req, ctx):
        return req

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handlers(echo),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)
        c0 = cpu_seconds()
        await loop.run_in_executor(None, sys.stdin.readline)
        print(cpu_seconds() - c0, flush=True)
        await server.stop(0)

    asyncio.run(main())


def call(port: str, threads: int, calls: int) -> None:
    """A client process: one channel, ``threads`` threads of ``calls`` blocking calls; prints calls/s."""
    import grpc

    echo = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/Floor/Echo")
    echo(PAYLOAD)                                   # connected before the clock starts

    def worker() -> None:
        for _ in range(calls):
            echo(PAYLOAD)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(threads * calls / (time.perf_counter() - t0), flush=True)


def run(kind: str, processes: int, threads: int, calls: int) -> list:
    me = os.path.abspath(__file__)
    server = subprocess.Popen([sys.executable, me, "--serve", kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        port = server.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"the {kind} server did not start")
        server.stdin.write("go\n")
        server.stdin.flush()
        clients = [subprocess.Popen([sys.executable, me, "--call", port, str(threads), str(calls)],
                                    stdout=subprocess.PIPE, text=True) for _ in range(processes)]
        rates = [float(c.stdout.read()) for c in clients]
        server.stdin.write("stop\n")
        server.stdin.flush()
        cpu = float(server.stdout.readline())
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
    total = processes * threads * calls
    return [kind, f"{sum(rates):,.0f}", f"{cpu / total * 1e6:.0f}"]


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return serve(argv[1])
    if argv[:1] == ["--call"]:
        return call(argv[1], int(argv[2]), int(argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("aio", "sync", "both"), default="both")
    ap.add_argument("--processes", type=int, default=4, help="client processes (default 4)")
    ap.add_argument("--threads", type=int, default=2, help="threads per client process (default 2)")
    ap.add_argument("--calls", type=int, default=1500, help="calls per thread (default 1500)")
    args = ap.parse_args(argv)
    for name in ("processes", "threads", "calls"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    print(f"machine: {machine()}\ncommand: {command()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    kinds = ("aio", "sync") if args.server == "both" else (args.server,)
    rows = [run(k, args.processes, args.threads, args.calls) for k in kinds]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(f"grpcio {__import__('grpc').__version__}, a unary echo of {len(PAYLOAD)} bytes: "
                f"{args.processes} processes x {args.threads} threads x {args.calls} calls",
                ["server", "calls/s", "server CPU µs/call"], rows)


if __name__ == "__main__":
    main()
