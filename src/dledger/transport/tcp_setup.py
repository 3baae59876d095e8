"""From a node's configuration to its TCP endpoint: address, secret, TLS, limits.

``tcp_endpoint(config, runtime)`` reads (duck-typed, so this layer does not import
``dledger.config``): ``group``, ``self_id``, ``peer_map`` (the validated ``peers``),
``secret_file`` (else the ``DLEDGER_SECRET`` environment variable), ``tls_cert_file`` /
``tls_key_file`` / ``tls_ca_file`` (mutual TLS when set), ``max_connections``,
``max_frame_bytes`` and the heartbeat timing. Timings follow the heartbeat: a keepalive on an
idle connection every ``heart_beat_time_interval_ms``, and a connection that hears nothing for four election
timeouts (at least two seconds) is closed and re-opened.

Groups whose nodes share an address in one process share its listener, so they share its
secret and its TLS settings: a group whose ``tls_cert_file``, ``tls_key_file`` or
``tls_ca_file`` differs from those of the groups already served there is refused with a
``ValueError`` naming the field (the listener would otherwise present the first group's
certificate and trust the first group's CA for the second group's peers).
"""

from __future__ import annotations

import os
from typing import Mapping

from dledger.protocol import MAX_FRAME_BYTES
from dledger.transport.auth import client_tls_context, load_secret, server_tls_context
from dledger.transport.tcp import TcpNetwork, TcpOptions, TcpTransport, split_host_port

#: the configuration fields a TLS context is made from (compared between groups on one port)
TLS_FIELDS = ("tls_cert_file", "tls_key_file", "tls_ca_file")
#: (host, port) -> (the network listening there, the TLS inputs of the first group it served)
_TLS_BY_ADDRESS: dict[tuple[str, int], tuple[TcpNetwork, tuple]] = {}


def options_for(config) -> TcpOptions:
    election_ms = config.max_heart_beat_leak * config.heart_beat_time_interval_ms
    idle = max(2000, 4 * election_ms)
    return TcpOptions(keepalive_ms=min(config.heart_beat_time_interval_ms, idle // 2),
                      idle_timeout_ms=idle, write_timeout_ms=idle,
                      max_connections=config.max_connections,
                      max_frame_bytes=getattr(config, "max_frame_bytes", MAX_FRAME_BYTES))


def tcp_endpoint(config, runtime, *, environ: Mapping[str, str] = os.environ,
                 options: TcpOptions | None = None) -> TcpTransport:
    """Register ``config.self_id`` on the process's network for its address (listening there
    on first use). ``runtime`` must be an asyncio runtime (it has a ``loop``)."""
    loop = getattr(runtime, "loop", None)
    if loop is None:
        raise RuntimeError("the TCP transport needs an asyncio runtime; pass transport= or hub=")
    host, port = split_host_port(config.peer_map[config.self_id])
    keys = load_secret(config.secret_file, environ)
    tls_inputs = tuple(getattr(config, name, None) for name in TLS_FIELDS)
    shared = _TLS_BY_ADDRESS.get((host, port))
    if shared is not None and not shared[0].closed:
        _check_same_tls(config, host, port, tls_inputs, shared[1])
    server_ssl = client_ssl = None
    if config.tls_cert_file:
        server_ssl = server_tls_context(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
        client_ssl = client_tls_context(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
    network = TcpNetwork.for_address(host, port, loop, keys=keys, server_ssl=server_ssl, client_ssl=client_ssl,
                                     options=options or options_for(config))
    shared = _TLS_BY_ADDRESS.get((host, network.port))
    if shared is None or shared[0] is not network:
        _TLS_BY_ADDRESS[(host, network.port)] = (network, tls_inputs)   # the first group here sets them
    try:
        return network.endpoint(config.group, config.self_id, config.peer_map)
    except BaseException:
        if not network.endpoints:
            network._remove_if_unused()
        raise


def _check_same_tls(config, host: str, port: int, mine: tuple, theirs: tuple) -> None:
    for name, a, b in zip(TLS_FIELDS, mine, theirs):
        if a != b:
            raise ValueError(f"group {config.group!r} node {config.self_id!r}: {name} {a!r} differs from {b!r} "
                             f"of the group(s) already served on {host}:{port} in this process; groups that "
                             f"share a port share its TLS settings")


__all__ = ["TLS_FIELDS", "options_for", "tcp_endpoint"]
