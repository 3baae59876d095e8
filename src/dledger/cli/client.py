"""The client subcommands of ``dledger``: ``append``, ``get``, ``status``, ``transfer-leader``.
``get`` reads in READ_INDEX_READ by default (``--read-mode``; ``--node`` asks one member only).

Each takes ``--peers`` and ``--group`` like ``dledger node`` (one reachable address is enough:
the others are learnt from it), ``--secret-file`` (else ``$DLEDGER_SECRET``), ``--timeout``, and
``--tls-cert``/``--tls-key``/``--tls-ca`` for a cluster with mutual TLS.
Exit codes: 0 done; 1 the group could not be reached or refused (one line on stderr);
2 bad flags; 3 an append whose outcome is unknown (it may be committed; it was not resent);
130 interrupted (Ctrl-C): ``append`` says how many entries were acknowledged before.
``append`` without bodies appends each line of stdin as soon as it is read. ``status`` prints a
table on a terminal and JSON (one object per node) when its output is a pipe or a file, or with
``--json`` / ``-w json``; ``-w table`` asks for the table anywhere. It asks the nodes of
``--peers`` and every member their answers name, and shows the leader's configuration: each
node's MEMBER (voter, learner, ``-`` when not a member), MATCH (the highest index the leader
knows it holds) and LAG (the leader's log end less MATCH).
The membership commands (``dledger member``) are in ``cli/member.py``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from dledger.client import AppendOutcomeUnknown, DLedgerClient
from dledger.client.membership import describe
from dledger.errors import DLedgerResponseCode
from dledger.protocol import ReadMode

PEERS_EXAMPLE = "'n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913'"
EXIT_UNKNOWN = 3
#: Ctrl-C, as for every command (``dledger.cli.EXIT_INTERRUPTED``)
EXIT_INTERRUPTED = 130


def _common(p: argparse.ArgumentParser, timeout: float = 3.0) -> None:
    p.add_argument("--peers", required=True, help="members of the group: 'n0-host:port;n1-host:port;...'")
    p.add_argument("--group", required=True, help="the group's name")
    p.add_argument("--secret-file", help="the shared secret, one key a line (else $DLEDGER_SECRET)")
    p.add_argument("--timeout", type=float, default=timeout, help=f"seconds per request (default {timeout:g})")
    p.add_argument("--tls-cert", help="client certificate (PEM) for mutual TLS; with --tls-key and --tls-ca")
    p.add_argument("--tls-key", help="its private key")
    p.add_argument("--tls-ca", help="the cluster CA that signs the nodes' certificates")


def _parser(sub, name: str, help_: str, example: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=help_,
                       epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    return p


def add_parsers(sub) -> None:
    p = _parser(sub, "append", "append entries; prints 'index term pos' per entry",
                f"dledger append --peers {PEERS_EXAMPLE} --group g hello world\n"
                f"  seq 3 | dledger append --peers {PEERS_EXAMPLE} --group g\n"
                f"  tail -f app.log | dledger append --peers {PEERS_EXAMPLE} --group g   # each line as it comes")
    p.add_argument("bodies", nargs="*", help="bodies to append (none: one per line of stdin, each appended as "
                                             "soon as it is read; Ctrl-C stops, keeping what was acknowledged)")
    p.set_defaults(func=cmd_append)

    p = _parser(sub, "get", "print the body of the committed entry at INDEX",
                f"dledger get --peers {PEERS_EXAMPLE} --group g 0\n"
                f"  dledger get --peers {PEERS_EXAMPLE} --group g --read-mode unsafe --node n1 0")
    p.add_argument("index", type=int)
    p.add_argument("--read-mode", type=_read_mode, default=ReadMode.READ_INDEX_READ, metavar="MODE",
                   help="read_index (default: the node confirms with a quorum that it leads, then answers), "
                        "lease, raft_log, or unsafe (the node's own log up to its commit index, any role; "
                        "may miss recent entries)")
    p.add_argument("--node", help="ask only this member (with --read-mode unsafe: read its own log)")
    p.set_defaults(func=cmd_get)

    p = _parser(sub, "status", "print every node's role, term, leader and indexes (unreachable nodes with "
                               "the error)",
                f"dledger status --peers {PEERS_EXAMPLE} --group g              # a table\n"
                f"  dledger status --peers {PEERS_EXAMPLE} --group g --json       # JSON (-w json)")
    p.add_argument("-w", "--write-out", choices=("table", "json"), default=None,
                   help="table, or json: one object per node (default: a table on a terminal, JSON when the "
                        "output is a pipe or a file)")
    p.add_argument("--json", dest="write_out", action="store_const", const="json", help="the same as -w json")
    p.set_defaults(func=cmd_status)

    p = _parser(sub, "transfer-leader", "ask the leader to hand leadership to another member",
                f"dledger transfer-leader --peers {PEERS_EXAMPLE} --group g --to n1")
    p.add_argument("--to", required=True, help="the member that should lead")
    p.set_defaults(func=cmd_transfer)


def _read_mode(text: str) -> ReadMode:
    """A read mode by short name (``read_index``, ``lease``, ``raft_log``, ``unsafe``) or by
    any name ``ReadMode.parse`` takes (``READ_INDEX_READ``)."""
    name = text.strip().lower().replace("-", "_")
    try:
        return ReadMode.parse(name if name.endswith("_read") else name + "_read")
    except ValueError:
        raise argparse.ArgumentTypeError(f"unknown read mode {text!r}; valid: read_index, lease, raft_log, "
                                         "unsafe") from None


def _client(args: argparse.Namespace) -> DLedgerClient:
    tls_files = (args.tls_cert, args.tls_key, args.tls_ca)
    if any(tls_files) and not all(tls_files):
        raise ValueError("TLS needs --tls-cert, --tls-key and --tls-ca together")
    return DLedgerClient(args.peers, args.group, timeout_s=args.timeout, secret_file=args.secret_file,
                         tls=tls_files if all(tls_files) else None)


def _stdin_bodies():
    """One body per line of stdin, each as soon as its line is read (so ``tail -f`` works)."""
    for line in sys.stdin.buffer:
        yield line.rstrip(b"\r\n")


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def cmd_append(args: argparse.Namespace) -> int:
    bodies = (b.encode() for b in args.bodies) if args.bodies else _stdin_bodies()
    done, sending = 0, False
    # Ctrl-C interrupts a wait (for a line of stdin, for an append's answer), never the printing
    # of an acknowledged entry and its count: those two always agree
    state = {"may_raise": True, "pending": False}

    def on_sigint(_signum, _frame) -> None:
        if state["may_raise"]:
            raise KeyboardInterrupt
        state["pending"] = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with _client(args) as c:
            for body in bodies:
                sending = True
                try:
                    r = c.append(body)
                except AppendOutcomeUnknown as exc:
                    print(f"dledger append: entry {done + 1}: outcome unknown, it may be committed (not "
                          f"resent): {exc}; {_entries(done)} appended before it", file=sys.stderr)
                    return EXIT_UNKNOWN
                state["may_raise"] = False
                sending = False
                print(f"{r.index} {r.term} {r.pos}", flush=True)
                done += 1
                state["may_raise"] = True
                if state["pending"]:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        pending = "; the entry being appended may or may not be committed" if sending else ""
        print(f"dledger append: interrupted: {_entries(done)} appended and acknowledged (printed above)"
              f"{pending}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    with _client(args) as c:
        entry = c.get(args.index, args.read_mode, args.node)
    sys.stdout.buffer.write(entry.body + b"\n")
    sys.stdout.flush()
    return 0


#: the columns of ``dledger status``'s table: (title, key in a node's metadata)
STATUS_COLUMNS = (("NODE", "node_id"), ("ADDRESS", "address"), ("ROLE", "role"), ("TERM", "term"),
                  ("LEADER", "leader_id"), ("LOG END", "ledger_end_index"), ("COMMITTED", "committed_index"),
                  ("MEMBER", "member"), ("MATCH", "match"), ("LAG", "lag"))


def status_table(status: dict[str, dict]) -> str:
    """Every node's answer as a table, one row per node; an unreachable node's row says why.
    MEMBER, MATCH and LAG are the leader's view (``-``: not a member, or no leader answered);
    a last line names the configuration the leader has in force."""
    rows = [[title for title, _key in STATUS_COLUMNS]]
    errors = []
    for node_id, s in status.items():
        if "error" in s:
            rows.append([node_id, s.get("address", ""), *["-"] * (len(STATUS_COLUMNS) - 2)])
            errors.append(f"{node_id}: {s['error']}")
            continue
        rows.append(["-" if s.get(key) is None else str(s[key]) for _title, key in STATUS_COLUMNS])
        if s.get("waiting"):
            errors.append(f"{node_id}: no leader: {s['waiting']}")
    widths = [max(len(row[k]) for row in rows) for k in range(len(STATUS_COLUMNS))]
    numeric = {"TERM", "LOG END", "COMMITTED", "MATCH", "LAG"}
    lines = ["  ".join(cell.rjust(w) if STATUS_COLUMNS[k][0] in numeric else cell.ljust(w)
                       for k, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    leader = max((s for s in status.values() if s.get("role") == "LEADER"), key=lambda s: s["term"], default=None)
    if leader is not None and leader.get("voters"):
        made = f"entry {leader['config_index']}" if leader.get("config_index", -1) >= 0 else "bootstrap"
        lines.append(f"configuration ({made}): {describe(leader['voters'], leader.get('learners') or {})}")
    return "\n".join(lines + errors)


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        status = c.status()
    how = args.write_out or ("table" if sys.stdout.isatty() else "json")
    if how == "json":
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(status_table(status))
    return 0 if any("error" not in s for s in status.values()) else 1


def cmd_transfer(args: argparse.Namespace) -> int:
    with _client(args) as c:
        leader = c.metadata()
        if leader["leader_id"] == args.to:
            print(f"{args.to} already leads (term {leader['term']}); nothing to do")
            return 0
        r = c.transfer_leadership(args.to)
    if r.code != 200:
        print(f"dledger transfer-leader: refused: {DLedgerResponseCode.of(r.code).name} (code {r.code})",
              file=sys.stderr)
        return 1
    print(f"{args.to} leads (term {r.term})" if r.term >= 0 else f"{args.to} leads")
    return 0


__all__ = ["add_parsers", "cmd_append", "cmd_get", "cmd_status", "cmd_transfer", "status_table"]
