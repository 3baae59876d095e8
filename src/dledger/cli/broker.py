"""``dledger broker``: one mini-broker process, a DLedgerServer over TCP with a ``DLedgerCommitLog``
on it, serving produce and pull on its broker port.

The node's flags are ``dledger node``'s (``--group --id --peers --store-dir --durability
--secret-file --bootstrap --config``, read the same way; one group only). The broker listens on
``--broker-port`` at the host of its own peer address, or on its own entry of ``--brokers``
(``'n0-host:port;n1-host:port;...'``, the same ids as ``--peers``; with the list, a put on a
follower also names the leader's broker address). That port's wire is the project's own msgpack frames,
not RocketMQ's remoting protocol (docs/broker.md). SIGTERM or SIGINT stops it cleanly: the
listener closes, dispatch stops, the store is flushed and closed, exit 0. It logs to stderr as
``dledger node`` does, each line of its node naming group, node id and term
(``runtime.log_context``). ``--metrics-port`` (``--metrics-host``) serves the node's metrics and
the broker's (``dledger.broker.metrics``).
``--remoting-port`` also serves RocketMQ's remoting protocol for the 4.x clients
(``dledger.broker.remoting``), registering with ``--namesrv`` when given.
``--grpc-port`` (``--grpc-endpoints``) also serves RocketMQ 5.x clients over gRPC v2
(``dledger.broker.grpc_v2``; the ``grpc`` extra).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dledger.cli.node import (NodeConfigError, add_metrics_flags, add_node_flags, load_configs, metrics_address,
                              ready_max_lag, start_metrics, start_server)

EXAMPLE = """example:
  dledger broker --group broker-a --id n0 \\
      --peers 'n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913' \\
      --brokers 'n0-127.0.0.1:30911;n1-127.0.0.1:30912;n2-127.0.0.1:30913' --store-dir /var/lib/broker
  dledger broker --config /etc/dledger/broker.toml --id n1 --broker-port 30912 --metrics-port 9101
  curl -s http://127.0.0.1:9101/metrics | grep dledger_broker_dispatch
  dledger broker --config broker.toml --id n0 --broker-port 30911 --remoting-port 10911 \\
      --namesrv 127.0.0.1:9876     # RocketMQ's remoting protocol too, registered with a name server
"""


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="run a mini broker (a node plus a message store) in the foreground",
                       description=__doc__.split("\n\n")[0], epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_flags(p)
    p.add_argument("--config", help="a TOML file of DLedgerConfig keys (one group)")
    p.add_argument("--broker-port", type=int, help="the port serving produce and pull")
    p.add_argument("--brokers", help="every broker's address under its node id: 'n0-host:port;...'")
    add_metrics_flags(p)
    add_remoting_flags(p)
    p.add_argument("--grpc-port", type=int, help="serve RocketMQ 5.x clients (gRPC v2) on this port (the proxy's is 8081)")
    p.add_argument("--grpc-endpoints", help="every broker's gRPC address under its node id: 'n0-host:port;...' "
                                            "(default: each node's peer host with --grpc-port)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


def add_remoting_flags(p) -> None:
    """RocketMQ's remoting protocol, for the 4.x clients (``dledger.broker.remoting``)."""
    g = p.add_argument_group("RocketMQ remoting")
    g.add_argument("--remoting-port", type=int, help="serve RocketMQ's remoting protocol on this port "
                                                      "(RocketMQ's default: 10911), at the host of the node's peer address")
    g.add_argument("--namesrv", help="name servers to register with: 'host:port;host:port'")
    g.add_argument("--broker-name", help="the broker name clients see (default: the group)")
    g.add_argument("--default-queues", type=int, default=4, help="queues of an auto-created topic (default 4)")


def remoting_settings(args: argparse.Namespace, config) -> dict | None:
    """The remoting server's settings from the flags (None without ``--remoting-port``), checked."""
    if args.remoting_port is None:
        if args.namesrv is not None:
            raise NodeConfigError("--namesrv needs --remoting-port")
        return None
    from dledger.transport.tcp import split_host_port

    if not 0 < args.remoting_port < 65536:
        raise NodeConfigError(f"--remoting-port: {args.remoting_port} is not in 1..65535")
    if not 1 <= args.default_queues <= 1024:
        raise NodeConfigError(f"--default-queues: {args.default_queues} is not in 1..1024")
    namesrvs = [a.strip() for a in (args.namesrv or "").split(";") if a.strip()]
    for a in namesrvs:
        if not a.rpartition(":")[2].isdigit() or not a.rpartition(":")[0]:
            raise NodeConfigError(f"--namesrv: {a!r} is not host:port")
    return {"host": split_host_port(config.peer_map[config.self_id])[0], "port": args.remoting_port,
            "broker_name": args.broker_name or config.group, "namesrvs": namesrvs,
            "default_queues": args.default_queues}


def start_remoting(settings: dict | None, commit_log):
    """The remoting server, started (None without settings)."""
    if settings is None:
        return None
    from dledger.broker.remoting.server import RemotingServer

    try:
        return RemotingServer(commit_log, **settings).start()
    except OSError as exc:
        raise RuntimeError(f"cannot serve remoting on {settings['host']}:{settings['port']}: "
                           f"{exc.strerror or exc}") from None


def broker_address(args: argparse.Namespace, config) -> tuple[str, int, dict[str, str]]:
    """Where this broker listens, and the list of every broker (maybe empty)."""
    from dledger.broker.client import parse_brokers
    from dledger.transport.tcp import split_host_port

    brokers: dict[str, str] = {}
    if args.brokers is not None:
        try:
            brokers = parse_brokers(args.brokers)
        except ValueError as exc:
            raise NodeConfigError(f"--brokers: {exc}") from None
    if args.broker_port is not None:
        if not 0 < args.broker_port < 65536:
            raise NodeConfigError(f"--broker-port: {args.broker_port} is not in 1..65535")
        host = split_host_port(config.peer_map[config.self_id])[0]
        return host, args.broker_port, brokers
    if config.self_id not in brokers:
        raise NodeConfigError(f"give --broker-port, or --brokers with an entry for {config.self_id}")
    host, port = split_host_port(brokers[config.self_id])
    return host, port, brokers


def start_grpc(args: argparse.Namespace, commit_log, config):
    """The gRPC v2 endpoint (``dledger.broker.grpc_v2``) when ``--grpc-port`` or ``--grpc-endpoints``
    is given, else None. Every broker's endpoint comes from ``--grpc-endpoints``, or is its
    node's peer host with this ``--grpc-port``."""
    if args.grpc_port is None and args.grpc_endpoints is None:
        return None
    from dledger.broker.client import parse_brokers
    from dledger.transport.tcp import split_host_port

    if args.grpc_port is not None and not 0 < args.grpc_port < 65536:
        raise NodeConfigError(f"--grpc-port: {args.grpc_port} is not in 1..65535")
    try:
        endpoints = parse_brokers(args.grpc_endpoints) if args.grpc_endpoints is not None else {
            node: f"{split_host_port(addr)[0]}:{args.grpc_port}" for node, addr in config.peer_map.items()}
    except ValueError as exc:
        raise NodeConfigError(f"--grpc-endpoints: {exc}") from None
    if config.self_id not in endpoints:
        raise NodeConfigError(f"--grpc-endpoints: no entry for {config.self_id}")
    host, port = split_host_port(endpoints[config.self_id])
    port = args.grpc_port if args.grpc_port is not None else port
    endpoints[config.self_id] = f"{host}:{port}"
    try:
        from dledger.broker.grpc_v2.endpoint import GrpcEndpoint
    except ImportError as exc:
        raise NodeConfigError(f"--grpc-port needs the grpc extra (pip install 'dledger[grpc]'): {exc}") from None
    try:
        return GrpcEndpoint(commit_log, host, port, grpc_endpoints=endpoints).start()
    except OSError as exc:
        raise RuntimeError(f"broker {config.self_id} cannot serve gRPC on {host}:{port}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from dledger.runtime.log_context import configure

    configure(args.log_level)            # dledger node's format: a node's lines name [group/node term]
    log = logging.getLogger("dledger.broker")
    configs = load_configs(args)
    if len(configs) != 1:
        raise NodeConfigError(f"a broker runs one group; {args.config} has {len(configs)}")
    config = configs[0]
    host, port, brokers = broker_address(args, config)
    remoting_flags = remoting_settings(args, config)
    metrics_address(args)                # a bad value is refused before anything starts
    ready_max_lag(args)

    from dledger.broker import DLedgerCommitLog, speedups
    from dledger.broker.server import BrokerServer
    from dledger.runtime.asyncio_runtime import AsyncioRuntime
    from dledger.server import DLedgerServer

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    runtime = AsyncioRuntime()
    server = commit_log = broker = endpoint = grpc = remoting = None
    try:
        endpoint = start_metrics(args, log)
        node = DLedgerServer(config, runtime=runtime)
        if endpoint is not None:
            endpoint.add(node)
        server = start_server(node)
        commit_log = DLedgerCommitLog(server)
        if endpoint is not None:
            from dledger.broker.metrics import BrokerCollector
            endpoint.registry.register(BrokerCollector(commit_log))
        try:
            broker = BrokerServer(commit_log, host, port, brokers=brokers).start()
        except OSError as exc:
            raise RuntimeError(f"broker {config.self_id} cannot listen on {host}:{port}: "
                               f"{exc.strerror or exc}") from None
        grpc = start_grpc(args, commit_log, config)
        remoting = start_remoting(remoting_flags, commit_log)
        log.info("node %s of group %s on %s, store %s; the broker's hot loops: %s", config.self_id, config.group,
                 config.peer_map[config.self_id], config.default_path, speedups.IMPLEMENTATION)
        print(f"dledger broker: {config.self_id} serving produce and pull on {broker.address}"
              f"{f', gRPC v2 on {grpc.address}' if grpc else ''}"
              f"{f', RocketMQ remoting on {remoting.address}' if remoting else ''}; SIGTERM or SIGINT stops",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        log.info("%s: shutting down", signal.Signals(received[0]).name)
    finally:
        for what, close in (("remoting", remoting and remoting.close), ("gRPC endpoint", grpc and grpc.close),
                            ("broker", broker and broker.close), ("commit log", commit_log and commit_log.close),
                            ("server", server and server.shutdown)):
            if close:
                try:
                    close()
                except Exception:  # keep closing the rest; the error is logged
                    log.exception("closing the %s failed", what)
        runtime.close()
        if endpoint is not None:
            endpoint.close()
        for s, handler in old.items():
            signal.signal(s, handler)
    log.info("stopped; store flushed")
    return 0


__all__ = ["add_parser", "add_remoting_flags", "broker_address", "remoting_settings", "run", "start_remoting"]
