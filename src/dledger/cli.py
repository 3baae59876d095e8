"""The ``dledger`` command.

Subcommands:
- ``demo``: the main job on embedded defaults (what ``make run`` runs);
- ``read-file <store dir>``: print the entries of a store directory (ours or Java DLedger's);
- ``verify <store dir>``: read and check every entry, report damage with file and offset;
- ``audit <dir> <dir> ...``: compare replicas with a Spark job (needs the ``spark`` extra);
- ``node``: run a node of one or several groups (``cli_node``);
- ``broker``: run a mini broker, a node with a message store serving produce and pull (``cli_broker``);
- ``append``, ``get``, ``status``, ``transfer-leader``: the client commands (``cli_client``).
Errors of ``node``, ``broker`` and the client commands are one line on stderr and a non-zero exit code:
2 for a bad flag or configuration, 1 for a group that cannot be reached or a node that cannot
start, 3 for an append whose outcome is unknown.
"""

from __future__ import annotations

import argparse
import sys


def _cmd_read_file(args: argparse.Namespace) -> int:
    from dledger.store import open_store

    with open_store(args.path) as store:
        print(f"# {store.store_dir}: begin {store.ledger_before_begin_index + 1}, end "
              f"{store.ledger_end_index}, term {store.ledger_end_term}, current term {store.current_term}")
        lo = args.begin if args.begin is not None else store.ledger_before_begin_index + 1
        hi = min(store.ledger_end_index, lo + args.limit - 1)
        for entry in store.iter_entries(lo, hi):
            body = entry.body[:args.body_bytes]
            print(f"{entry.index}\tterm={entry.term}\tpos={entry.pos}\tmagic={entry.magic}\t"
                  f"size={entry.size}\tcrc={entry.body_crc:#010x}\t{body!r}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from dledger.progress import Progress
    from dledger.store import open_store

    with open_store(args.path) as store:
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
    try:
        from dledger.spark.audit import main as audit_main
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        print(f"the audit needs the spark extra (pip install 'dledger[spark]'): {exc}", file=sys.stderr)
        return 2
    return audit_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dledger", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="run the main job on embedded defaults")
    p.add_argument("--dir", default=None, help="where to put the stores (default: a temporary dir)")
    p.add_argument("--entries", type=int, default=200_000, help="entries to append")
    p.add_argument("--no-audit", dest="audit", action="store_false",
                   help="skip the Spark replica audit at the end")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("read-file", help="print the entries of a store directory")
    p.add_argument("path")
    p.add_argument("--begin", type=int, default=None)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--body-bytes", type=int, default=32)
    p.set_defaults(func=_cmd_read_file)

    p = sub.add_parser("verify", help="check every entry of a store directory")
    p.add_argument("path")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("audit", help="compare replicas with a Spark job", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_audit)

    from dledger import cli_broker, cli_client, cli_node
    cli_node.add_parser(sub)
    cli_broker.add_parser(sub)
    cli_client.add_parsers(sub)
    return parser


def _guarded(args: argparse.Namespace) -> int:
    """Run ``node``, ``broker`` or a client command: every expected failure is one line, no traceback."""
    from dledger.cli_node import NodeConfigError
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
    except (DLedgerError, OSError, RuntimeError) as exc:   # unreachable group, port in use, locked store
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("node", "broker", "append", "get", "status", "transfer-leader"):
            return _guarded(args)
        return args.func(args)
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":
    sys.exit(main())
