"""``dledger namesrv``: a name server for RocketMQ clients of dledger brokers, in the foreground.

Brokers started with ``--remoting-port`` and ``--namesrv 'host:port;...'`` register with it;
clients ask it for a topic's route (``dledger.namesrv``). SIGTERM or SIGINT stops it, exit 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

EXAMPLE = """example:
  dledger namesrv --port 9876
  dledger broker --config broker.toml --id n0 --broker-port 30911 --remoting-port 10911 \\
      --namesrv 127.0.0.1:9876
"""


def add_parser(sub) -> None:
    p = sub.add_parser("namesrv", help="run a name server for RocketMQ remoting clients in the foreground",
                       description=__doc__.split("\n\n")[0], epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9876, help="the port (default 9876, RocketMQ's)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dledger.cli.node import NodeConfigError
    from dledger.namesrv import NameServer

    if not 0 < args.port < 65536:
        raise NodeConfigError(f"--port: {args.port} is not in 1..65535")
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    old = {s: signal.signal(s, lambda _s, _f: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            server = NameServer(args.host, args.port).start()
        except OSError as exc:
            raise RuntimeError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
        print(f"dledger namesrv: serving routes on {server.address}; SIGTERM or SIGINT stops",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        server.close()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return 0


__all__ = ["add_parser", "run"]
