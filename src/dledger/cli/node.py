"""``dledger node``: run one process serving one group (from flags) or several (from a TOML file).

The configuration of each group is a ``DLedgerConfig``. From flags: ``--group``, ``--id``,
``--peers``, ``--store-dir``, ``--durability``, ``--secret-file``, ``--bootstrap``, ``--join``,
``--tls-cert``/``--tls-key``/``--tls-ca`` (mutual TLS, as the client's flags) and
``--store-segment-size`` (the data segment size; the index segment's in proportion). From ``--config FILE`` (TOML,
read with the standard library): top-level keys are defaults for every group, and each
``[[groups]]`` table is one group; keys are ``DLedgerConfig`` field names, with the flag names
``id`` and ``store_dir`` accepted for ``self_id`` and ``store_base_dir``. Flags given together
with ``--config`` override the file's defaults. An unknown key or a bad value is refused before
anything starts, with one line naming it. Groups of the file that would share a store directory
each get ``<store_dir>/<group>/dledger-<id>`` (``cli.store_dirs``).

``--metrics-port PORT`` (or a top-level ``metrics_port`` key in the file) serves the metrics of
every group on ``http://<metrics-host>:PORT/metrics`` (Prometheus text format;
``dledger.metrics``), and ``/health`` and ``/ready`` beside them (``--ready-max-lag``,
``ready_max_lag``: how far behind its leader's commit index a ready node may be);
``--metrics-host`` (``metrics_host``) defaults to every interface.

The process runs in the foreground and logs to stderr, each line of a node naming its group,
node id and term (``runtime.log_context``). SIGTERM or SIGINT shuts every group down cleanly
(pending appends fail, the stores are flushed and closed) and exits with 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from dataclasses import fields
from typing import Any

from dledger.config import DLedgerConfig
from dledger.metrics.health import DEFAULT_READY_MAX_LAG

EXAMPLE = """example:
  dledger node --group g --id n0 --peers 'n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913' \\
      --store-dir /var/lib/dledger --secret-file /etc/dledger/secret --store-segment-size 64MiB
  dledger node --group g --id n3 --peers '<the members>;n3-10.0.0.4:20911' --store-dir /var/lib/dledger \\
      --join                            # a new member: then, from anywhere, dledger member add ... --id n3
  dledger node --config /etc/dledger/node.toml --metrics-port 9100
  curl -s http://127.0.0.1:9100/metrics | grep dledger_term
  curl -s http://127.0.0.1:9100/ready                      # 200 ready, or 503 and the reason
"""

ALIASES = {"id": "self_id", "store_dir": "store_base_dir"}
#: top-level keys of the TOML file about the process, not a group
PROCESS_KEYS = ("metrics_port", "metrics_host", "ready_max_lag")
FLAG_FIELDS = {"group": "group", "id": "self_id", "peers": "peers", "store_dir": "store_base_dir",
               "durability": "durability", "secret_file": "secret_file", "bootstrap": "bootstrap",
               "join": "join",
               "tls_cert": "tls_cert_file", "tls_key": "tls_key_file", "tls_ca": "tls_ca_file"}
#: the default data segment over the default index segment (1 GiB over 160 MiB, Java DLedger's):
#: ``--store-segment-size`` keeps it when the index size is not given
INDEX_PER_DATA = (5, 32)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


class NodeConfigError(ValueError):
    """The node's configuration cannot be used (the message names the key or flag)."""


def add_node_flags(p) -> None:
    """The flags of one node (``FLAG_FIELDS``), shared by ``dledger node`` and ``dledger broker``."""
    p.add_argument("--group", help="the group's name")
    p.add_argument("--id", help="this node's id (one of the ids in --peers)")
    p.add_argument("--peers", help="every member of the group: 'n0-host:port;n1-host:port;...'")
    p.add_argument("--store-dir", help="the store lives in <store-dir>/dledger-<id>")
    p.add_argument("--durability", choices=("page_cache", "fsync"),
                   help="page_cache (survives a process crash) or fsync (also power loss)")
    p.add_argument("--secret-file", help="the shared secret of the Raft port, one key a line (else "
                                         "$DLEDGER_SECRET)")
    p.add_argument("--bootstrap", action="store_const", const=True, default=None,
                   help="this node starts a brand-new cluster (its new, empty store may vote at once "
                        "even with a member missing); never for a node whose disk was replaced")
    p.add_argument("--join", action="store_const", const=True, default=None,
                   help="this node joins a running group: its --peers names the members and itself; it "
                        "serves, takes no vote and waits until a member adds it (dledger member add)")
    p.add_argument("--tls-cert", help="this node's certificate (PEM): mutual TLS, with --tls-key and --tls-ca")
    p.add_argument("--tls-key", help="its private key")
    p.add_argument("--tls-ca", help="the cluster CA that signs every member's (and client's) certificate")
    p.add_argument("--store-segment-size", metavar="SIZE",
                   help="data segment size, allocated in full when a segment is created: bytes, or with "
                        "KiB, MiB or GiB (default 1GiB; e.g. 64MiB for a first try); the index segment "
                        "gets 5/32 of it unless mapped_file_size_for_entry_index is set. A store keeps "
                        "the size it was created with")


def add_metrics_flags(p) -> None:
    """``--metrics-port`` and ``--metrics-host`` (read by ``metrics_address``), shared by ``dledger
    node`` and ``dledger broker``."""
    p.add_argument("--metrics-port", metavar="PORT",
                   help="serve Prometheus metrics of every group on this port (0: any free port)")
    p.add_argument("--metrics-host", metavar="HOST",
                   help="the address the metrics port listens on (default: every interface, 0.0.0.0)")
    p.add_argument("--ready-max-lag", metavar="ENTRIES",
                   help=f"/ready answers 200 only while the node's commit index is at most this many "
                        f"entries behind its leader's (default {DEFAULT_READY_MAX_LAG})")


def add_parser(sub) -> None:
    p = sub.add_parser("node", help="run a node of one or more groups in the foreground",
                       description=__doc__.split("\n\n")[0], epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_node_flags(p)
    p.add_argument("--config", help="a TOML file with one or several groups")
    add_metrics_flags(p)
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


def _port(value: Any, where: str, *, text: bool = False) -> int:
    """A metrics port from a flag (``text``) or the file (a TOML integer), checked."""
    port = int(value) if text and isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(port, bool) or not isinstance(port, int):
        raise NodeConfigError(f"{where}: not a port number: {value!r}")
    if not 0 <= port <= 65535:
        raise NodeConfigError(f"{where}: {port} is out of range (0-65535)")
    return port


def _field_names() -> set[str]:
    return {f.name for f in fields(DLedgerConfig) if f.init}


def _did_you_mean(key: str, choices) -> str:
    import difflib
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) or isinstance(value, list) and bool(value) and all(
        isinstance(v, dict) for v in value)


def _config_from(values: dict[str, Any], where: str) -> DLedgerConfig:
    known = _field_names()
    kwargs = {}
    for key, value in values.items():
        name = ALIASES.get(key, key)
        if _is_table(value):
            raise NodeConfigError(f"{where}: {key!r} is a table; a group's settings are plain keys")
        if name not in known:
            raise NodeConfigError(f"{where}: unknown key {key!r}{_did_you_mean(key, [*known, *ALIASES])}")
        kwargs[name] = value
    for required in ("group", "self_id", "peers"):
        if required not in kwargs:
            flag = {"self_id": "id"}.get(required, required)
            raise NodeConfigError(f"{where}: {flag} is missing")
    try:
        return DLedgerConfig(**kwargs).validate()
    except (TypeError, ValueError) as exc:
        raise NodeConfigError(f"{where}: {exc}") from None


def parse_size(text: str, where: str) -> int:
    """``"64MiB"``, ``"64M"``, ``"4096"`` -> bytes (binary units); ``NodeConfigError`` naming
    ``where`` otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = m and _SIZE_UNITS.get(m.group(2).lower())
    if not unit:
        raise NodeConfigError(f"{where}: {text!r} is not a size (bytes, or a number with KiB, MiB or GiB)")
    return int(m.group(1)) * unit


def _segment_sizes(args: argparse.Namespace) -> dict[str, int]:
    """``--store-segment-size``: the data segment size, and the index segment's in Java
    DLedger's proportion (a multiple of 32 bytes), used where no index size is given."""
    text = getattr(args, "store_segment_size", None)
    if text is None:
        return {}
    data = parse_size(text, "--store-segment-size")
    index = max(32 * 1024, data * INDEX_PER_DATA[0] // INDEX_PER_DATA[1] // 32 * 32)
    return {"mapped_file_size_for_entry_data": data, "mapped_file_size_for_entry_index": index}


def _with_segments(values: dict[str, Any], segments: dict[str, int]) -> dict[str, Any]:
    """``values`` with ``--store-segment-size``'s data size, and its index size unless one is set."""
    if not segments:
        return values
    index = "mapped_file_size_for_entry_index"
    return {**values, "mapped_file_size_for_entry_data": segments["mapped_file_size_for_entry_data"],
            index: values.get(index, segments[index])}


def load_configs(args: argparse.Namespace) -> list[DLedgerConfig]:
    """The groups to run: from ``--config`` (with flags as defaults' overrides) or from flags."""
    flags = {FLAG_FIELDS[key] if key.startswith("tls_") else key: getattr(args, key)
             for key in FLAG_FIELDS if getattr(args, key, None) is not None}
    segments = _segment_sizes(args)
    if args.config is None:
        return [_config_from(_with_segments(flags, segments), "flags")]
    import tomllib
    try:
        with open(args.config, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise NodeConfigError(f"cannot read {args.config}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise NodeConfigError(f"{args.config} is not valid TOML: {exc}") from None
    groups = doc.pop("groups", None)
    for key in PROCESS_KEYS:
        doc.pop(key, None)
    for key, value in doc.items():           # a misspelt [[groups]] is a table, not a setting
        if _is_table(value):
            section = f"[[{key}]]" if isinstance(value, list) else f"[{key}]"
            hint = " (did you mean [[groups]]?)" if _did_you_mean(key, ["groups"]) else ""
            raise NodeConfigError(f"{args.config}: {section} is not a table this file has{hint}; each group "
                                  f"is a [[groups]] table")
    defaults = {**doc, **flags}
    if groups is None:
        return [_config_from(_with_segments(defaults, segments), args.config)]
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise NodeConfigError(f"{args.config}: groups must be a non-empty array of tables ([[groups]])")
    configs = [_config_from(_with_segments({**defaults, **g}, segments), f"{args.config} [[groups]] #{k + 1}")
               for k, g in enumerate(groups)]
    seen = set()
    for c in configs:
        if c.group in seen:
            raise NodeConfigError(f"{args.config}: group {c.group!r} appears twice")
        seen.add(c.group)
    from dledger.cli.store_dirs import place
    try:
        return place(configs, [any(key in g for key in ("store_dir", "store_base_dir")) for g in groups], args.config)
    except ValueError as exc:
        raise NodeConfigError(str(exc)) from None


def _process_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The file's top-level process keys (``PROCESS_KEYS``); none without ``--config``."""
    if args.config is None:
        return {}
    import tomllib
    try:
        with open(args.config, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}                        # load_configs has said what is wrong with the file
    return {key: doc[key] for key in PROCESS_KEYS if key in doc}


def metrics_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """``(host, port)`` of the metrics endpoint from the flags, else the file's top-level
    ``metrics_port`` and ``metrics_host``; None when no port is given."""
    port, host = args.metrics_port, args.metrics_host
    if port is not None:
        port = _port(port, "--metrics-port", text=True)
    doc = _process_keys(args)
    if port is None and "metrics_port" in doc:
        port = _port(doc["metrics_port"], f"{args.config}: metrics_port")
    if host is None and "metrics_host" in doc:
        host = doc["metrics_host"]
        if not isinstance(host, str):
            raise NodeConfigError(f"{args.config}: metrics_host must be a string, got {host!r}")
    if port is None:
        return None
    return (host if host is not None else "0.0.0.0"), port


def ready_max_lag(args: argparse.Namespace) -> int:
    """``--ready-max-lag``, else the file's ``ready_max_lag``, else the default."""
    value, where = getattr(args, "ready_max_lag", None), "--ready-max-lag"
    if value is not None:
        value = int(value) if value.strip().isdigit() else value
    else:
        value, where = _process_keys(args).get("ready_max_lag", DEFAULT_READY_MAX_LAG), f"{args.config}: ready_max_lag"
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NodeConfigError(f"{where}: not a number of entries (0 or more): {value!r}")
    return value


def start_metrics(args: argparse.Namespace, log: logging.Logger):
    """The metrics endpoint the flags and file ask for (``MetricsPortError`` when its port is
    taken: one line, exit 1), or None; its URLs are logged."""
    address = metrics_address(args)
    if address is None:
        return None
    from dledger.metrics import serve
    endpoint = serve(address[1], host=address[0], ready_max_lag=ready_max_lag(args))
    log.info("metrics on http://%s:%d/metrics, health on /health and /ready", address[0], endpoint.port)
    return endpoint


def start_server(server):
    """``server.startup()``, with an ``OSError`` turned into one line naming what failed: the
    store directory (a path the system refused: permission denied, not a directory) or the
    listening address (in use, not this host's)."""
    c = server.config
    try:
        return server.startup()
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.filename is not None:
            where = "" if os.path.abspath(exc.filename) == os.path.abspath(c.default_path) else f" ({exc.filename})"
            raise RuntimeError(f"node {c.self_id} of group {c.group} cannot use its store directory "
                               f"{c.default_path}: {why}{where}") from None
        raise RuntimeError(f"node {c.self_id} of group {c.group} cannot start on {c.peer_map[c.self_id]}: "
                           f"{why}") from None


def run(args: argparse.Namespace) -> int:
    from dledger.runtime.log_context import configure

    configure(args.log_level)
    log = logging.getLogger("dledger.node")
    configs = load_configs(args)
    metrics_address(args)                # a bad value is refused before anything starts
    ready_max_lag(args)

    from dledger.runtime.asyncio_runtime import AsyncioRuntime
    from dledger.server import DLedgerServer

    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame) -> None:
        received.append(signum)
        stop.set()

    endpoint = start_metrics(args, log)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    runtime = AsyncioRuntime()
    servers: list[DLedgerServer] = []
    try:
        for c in configs:
            server = DLedgerServer(c, runtime=runtime)
            if endpoint is not None:
                endpoint.add(server)
            servers.append(start_server(server))
            log.info("node %s of group %s listening on %s, store %s", c.self_id, c.group,
                     c.peer_map[c.self_id], c.default_path)
        print(f"dledger node: serving {len(servers)} group(s); SIGTERM or SIGINT stops", file=sys.stderr,
              flush=True)
        while not stop.wait(0.5):
            pass
        log.info("%s: shutting down", signal.Signals(received[0]).name)
    finally:
        for s in reversed(servers):
            try:
                s.shutdown()
            except Exception:  # keep closing the others; the error is logged
                log.exception("shutting down %s failed", s.config.self_id)
        runtime.close()
        if endpoint is not None:
            endpoint.close()
        for s, handler in old.items():
            signal.signal(s, handler)
    log.info("stopped; stores flushed")
    return 0


__all__ = ["NodeConfigError", "add_node_flags", "add_parser", "load_configs", "metrics_address", "ready_max_lag",
           "run", "start_metrics"]
