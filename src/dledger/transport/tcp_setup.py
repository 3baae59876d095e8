"""From a node's configuration to its TCP endpoint: address, secret, TLS, limits.

``tcp_endpoint(config, runtime)`` reads (duck-typed, so this layer does not import
``dledger.config``): ``group``, ``self_id``, ``peer_map`` (the validated ``peers``),
``secret_file`` (else the ``DLEDGER_SECRET`` environment variable), ``tls_cert_file`` /
``tls_key_file`` / ``tls_ca_file`` (mutual TLS when set), ``max_connections``,
``max_frame_bytes`` and the heartbeat timing. Timings follow the heartbeat: a keepalive on an
idle connection every ``heart_beat_time_interval_ms``, and a connection that hears nothing for four election
timeouts (at least two seconds) is closed and re-opened.
"""

from __future__ import annotations

import os
from typing import Mapping

from dledger.protocol import MAX_FRAME_BYTES
from dledger.transport.auth import client_tls_context, load_secret, server_tls_context
from dledger.transport.tcp import TcpNetwork, TcpOptions, TcpTransport, split_host_port


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
    server_ssl = client_ssl = None
    if config.tls_cert_file:
        server_ssl = server_tls_context(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
        client_ssl = client_tls_context(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
    network = TcpNetwork.for_address(host, port, loop, keys=keys, server_ssl=server_ssl, client_ssl=client_ssl,
                                     options=options or options_for(config))
    try:
        return network.endpoint(config.group, config.self_id, config.peer_map)
    except BaseException:
        if not network.endpoints:
            network._remove_if_unused()
        raise


__all__ = ["options_for", "tcp_endpoint"]
