"""The ``dledger`` command.

``dledger --version`` prints dledger's version and Python's. Subcommands:
- ``demo``: the main job on embedded defaults (what ``make run`` runs);
- ``read-file <store dir>``: print the entries of a store directory (ours or Java DLedger's);
- ``verify <store dir>``: read and check every entry, report damage with file and offset;
- ``audit <dir> <dir> ...``: compare replicas with a Spark job (needs the ``spark`` extra);
- ``node``: run a node of one or several groups (``cli/node.py``);
- ``broker``: run a mini broker, a node with a message store serving produce and pull (``cli/broker.py``);
- ``namesrv``: run a name server for RocketMQ remoting clients of brokers (``cli/namesrv.py``);
- ``append``, ``get``, ``status``, ``transfer-leader``: the client commands (``cli/client.py``);
- ``member add|promote|remove|list``: change or list a running group's members (``cli/member.py``);
- ``bench``: committed entries/s and commit latency of a 3-process cluster (``bench.cli``).
Errors of ``node``, ``broker``, ``namesrv`` and the client commands are one line on stderr and a non-zero exit code:
2 for a bad flag or configuration (argparse's own errors too), 1 for a group that cannot be
reached or a node that cannot start, 3 for an append whose outcome is unknown. Ctrl-C prints
one line and exits with 130 (``append``, ``audit``, ``demo`` and the rest; ``node``, ``broker``
and ``namesrv`` stop cleanly on SIGINT and exit with 0).
"""

from __future__ import annotations

import argparse
import os
import sys


def _open_for(command: str, path: str):
    """Open a store read-only for ``read-file``/``verify``; a missing or foreign directory
    raises ``_Exit(2)`` after one line on stderr."""
    from dledger.errors import StoreLayoutError
    from dledger.store import open_store

    try:
        return open_store(path)
    except (StoreLayoutError, OSError) as exc:
        print(f"dledger {command}: error: {exc}", file=sys.stderr)
        raise _Exit(2) from None


#: the exit code after Ctrl-C (SIGINT), as a shell reports it: 128 + 2
EXIT_INTERRUPTED = 130


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _cmd_read_file(args: argparse.Namespace) -> int:
    from dledger.errors import DLedgerError

    if args.limit < 1:
        print(f"dledger read-file: error: --limit must be at least 1, got {args.limit}",
              file=sys.stderr)
        return 2
    try:
        store = _open_for("read-file", args.path)
    except _Exit as exc:
        return exc.code
    except DLedgerError as exc:         # damage the store's recovery refuses
        print(f"dledger read-file: error: {exc}", file=sys.stderr)
        return 2
    with store:
        first, last = store.ledger_before_begin_index + 1, store.ledger_end_index
        print(f"# {store.store_dir}: begin {first}, end "
              f"{last}, term {store.ledger_end_term}, current term {store.current_term}")
        lo = args.begin if args.begin is not None else first
        if args.begin is not None and not first <= lo <= last:
            held = f"entries {first}..{last}" if last >= first else "no entries"
            print(f"dledger read-file: error: --begin {lo} is outside the log ({held})",
                  file=sys.stderr)
            return 2
        hi = min(last, lo + args.limit - 1)
        for entry in store.iter_entries(lo, hi):
            body = entry.body[:args.body_bytes]
            print(f"{entry.index}\tterm={entry.term}\tpos={entry.pos}\tmagic={entry.magic}\t"
                  f"size={entry.size}\tcrc={entry.body_crc:#010x}\t{body!r}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from dledger.errors import DLedgerError
    from dledger.progress_bar import Progress

    try:
        store = _open_for("verify", args.path)
    except _Exit as exc:
        return exc.code
    except DLedgerError as exc:         # damage the store's recovery refuses: that is damage
        print(f"CORRUPT: the store does not open: {exc}")
        return 1
    with store:
        total = store.ledger_end_index - store.ledger_before_begin_index
        with Progress(total, "verify", unit="entries") as bar:
            first = store.ledger_before_begin_index + 1
            errors = store.verify(progress=lambda i: bar.update(i - first + 1))
        for err in errors:
            print(f"CORRUPT: {err}")
        print(f"{total} entries checked, {len(errors)} corrupt")
    return 1 if errors else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from dledger.demo import main as demo_main

    return demo_main(args)


def _cmd_audit(args: argparse.Namespace) -> int:
    from dledger.cli.audit import run                 # no pyspark import until it runs

    return run(args.rest)


def version() -> str:
    """``dledger 0.1.0 (Python 3.11.7)``: what ``dledger --version`` prints."""
    import platform

    from dledger import __version__
    return f"dledger {__version__} (Python {platform.python_version()})"


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (and exit code 2), as every other
    error of the command: ``dledger get: error: argument index: invalid int value: 'x' (dledger get
    --help shows the usage)``. Subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help shows the usage)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="dledger", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=version(),
                        help="print the version of dledger and of Python, and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="run the main job: 3 node processes, the leader SIGKILLed mid-stream",
                       description="Start a 3-node cluster as three `dledger node` processes on loopback,\n"
                                   "append a stream of unique entries through the client, SIGKILL the leader\n"
                                   "at 40 %, restart it at 70 %, stop the nodes, check every acknowledged entry\n"
                                   "on every replica, write latency.png and run the Spark replica audit.\n"
                                   "Exit 0 when every check passed, 1 when one failed, 2 for a bad argument.",
                       epilog="example:\n  dledger demo --dir run-output              # what `make run` runs\n"
                              "  dledger demo --entries 20000 --no-audit     # a quick run in a temporary folder",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default=None,
                   help="output folder for the stores, node logs, secret, chart and audit (default: a "
                        "temporary folder, removed at the end); must not hold stores of an earlier run")
    p.add_argument("--entries", type=int, default=200_000, help="entries to append (default 200000)")
    p.add_argument("--batch", type=int, default=None, help="entries per batch_append call (default 128)")
    p.add_argument("--in-flight", type=int, default=None, help="batches in flight at once (default 8)")
    p.add_argument("--body-size", type=int, default=None, help="bytes per entry (default 128)")
    p.add_argument("--no-audit", dest="audit", action="store_false",
                   help="skip the Spark replica audit at the end")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("read-file", help="print the entries of a store directory",
                       epilog="example: dledger read-file /data/dledger-n0 --begin 1000 --limit 5; "
                              "exit 2 for a directory that is not a store or a --begin outside "
                              "the log")
    p.add_argument("path")
    p.add_argument("--begin", type=int, default=None, help="first index to print (default: the first)")
    p.add_argument("--limit", type=int, default=20, help="how many entries (default 20)")
    p.add_argument("--body-bytes", type=int, default=32, help="body bytes shown per entry")
    p.set_defaults(func=_cmd_read_file)

    p = sub.add_parser("verify", help="check every entry of a store directory",
                       epilog="example: dledger verify /data/dledger-n0; exit 0 sound, 1 damage "
                              "found, 2 not a store")
    p.add_argument("path")
    p.set_defaults(func=_cmd_verify)

    # its own parser (dledger.spark.audit_cli): options go before or after the paths
    p = sub.add_parser("audit", help="compare replicas with a Spark job (dledger audit --help)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_audit)

    from dledger.cli import broker, client, member, namesrv, node
    node.add_parser(sub)
    broker.add_parser(sub)
    namesrv.add_parser(sub)
    client.add_parsers(sub)
    member.add_parser(sub)
    from dledger.bench import cli as bench_cli
    bench_cli.add_parser(sub)
    #: each subcommand's parser, by name (its errors name it)
    parser.commands = dict(sub.choices)
    return parser


def _guarded(args: argparse.Namespace) -> int:
    """Run ``node``, ``broker`` or a client command: every expected failure is one line, no traceback."""
    from dledger.cli.node import NodeConfigError
    from dledger.errors import DLedgerError

    name = f"dledger {args.command}"
    try:
        return args.func(args)
    except NodeConfigError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:         # a bad --peers, secret or body
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise                                       # main() ends quietly
    except (DLedgerError, OSError, RuntimeError) as exc:   # unreachable group, port in use, locked store
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and not argv[0].startswith("-") else None
    try:
        if command == "audit":
            return _cmd_audit(argparse.Namespace(rest=argv[1:]))
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:                        # said by the subcommand, whose --help explains it
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command in ("node", "broker", "namesrv", "append", "get", "status", "transfer-leader", "member",
                            "bench"):
            return _guarded(args)
        return args.func(args)
    except BrokenPipeError:
        # the reader of the output went away (``dledger status --json | head``): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        # Ctrl-C: one line, no traceback (``append`` says itself what was acknowledged; the
        # node commands stop cleanly on SIGINT and never get here)
        print(f"dledger{f' {command}' if command else ''}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
