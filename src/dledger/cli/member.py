"""``dledger member add|promote|remove|list``: change a running group's members, or list them.

Client commands, like ``dledger status`` (the same ``--peers``, ``--group``, ``--secret-file``,
``--timeout`` and TLS flags; ``--peers`` may name any members). The leader makes each change
one at a time, through its log (docs/operations.md):
- ``add --id N --address host:port``: add N as a learner, then promote it to voter once it has
  caught up (``--learner``: leave it a learner; ``--wait`` seconds for it to catch up, 60 by
  default). N runs ``dledger node ... --join`` first;
- ``promote --id N``: make learner N a voter now (refused while it lags);
- ``remove --id N``: remove member N (the leader too: leadership moves to another voter first);
- ``list``: one member a line, ``id address voter|learner match_index``, from the leader's view
  (``--json``: an object with the leader, the configuration's entry and the members, each with
  its lag behind the leader's log end).
A change prints one line (what was done and the configuration after it), or with ``--json`` the
leader's answer. Exit codes as the other client commands: 0 done; 1 refused or the group could
not be reached (one line on stderr, the leader's reason); 2 bad flags.
"""

from __future__ import annotations

import argparse
import json
import sys

from dledger.cli.client import PEERS_EXAMPLE, _client, _common
from dledger.client.membership import ADD_MEMBER_TIMEOUT_S, describe
from dledger.errors import DLedgerResponseCode as Code

EXAMPLES = f"""examples:
  # on the new machine: serve, take no vote, wait to be added
  dledger node --group g --id n3 --peers '<the members>;n3-10.0.0.4:20911' --store-dir /var/lib/dledger --join
  # from anywhere: add it (a learner, promoted once it caught up), check, remove a member
  dledger member add --peers {PEERS_EXAMPLE} --group g --id n3 --address 10.0.0.4:20911
  dledger member list --peers {PEERS_EXAMPLE} --group g
  dledger member remove --peers {PEERS_EXAMPLE} --group g --id n1
  dledger member add --peers {PEERS_EXAMPLE} --group g --id n4 --address 10.0.0.5:20911 --learner
  dledger member promote --peers {PEERS_EXAMPLE} --group g --id n4
"""


def add_parser(sub) -> None:
    p = sub.add_parser("member", help="add, promote, remove or list the members of a running group",
                       description="Change a running group's members (add, promote, remove) or list them; "
                                   "each change through the leader, one at a time.", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, parser_class=type(p))

    def action(name: str, help_: str, example: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_, description=help_, epilog=f"example:\n  {example}",
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(a, timeout=10.0)           # a change waits for its entry to commit
        a.add_argument("--json", action="store_true", help="print the leader's answer as JSON")
        return a

    a = action("add", "add a member: a learner, promoted to voter once it has caught up",
               f"dledger member add --peers {PEERS_EXAMPLE} --group g --id n3 --address 10.0.0.4:20911")
    a.add_argument("--id", required=True, help="the new member's id (it runs `dledger node ... --join`)")
    a.add_argument("--address", required=True, help="its host:port, as the members reach it")
    a.add_argument("--learner", action="store_true", help="leave it a learner (promote it later)")
    a.add_argument("--wait", type=float, default=ADD_MEMBER_TIMEOUT_S, metavar="SECONDS",
                   help=f"how long it may take to catch up before its promotion (default {ADD_MEMBER_TIMEOUT_S:g})")
    a.set_defaults(func=cmd_add)

    a = action("promote", "make a learner a voter (refused while it lags)",
               f"dledger member promote --peers {PEERS_EXAMPLE} --group g --id n3")
    a.add_argument("--id", required=True, help="the learner's id")
    a.set_defaults(func=cmd_promote)

    a = action("remove", "remove a member (the leader too: leadership moves first)",
               f"dledger member remove --peers {PEERS_EXAMPLE} --group g --id n1")
    a.add_argument("--id", required=True, help="the member's id")
    a.set_defaults(func=cmd_remove)

    a = action("list", "print the members, one a line: id address voter|learner match_index",
               f"dledger member list --peers {PEERS_EXAMPLE} --group g --json")
    a.set_defaults(func=cmd_list)


def _answer(args: argparse.Namespace, resp, done: str) -> int:
    """Print a change's answer: one line (or JSON); 0 on SUCCESS, 1 (stderr) on a refusal."""
    if args.json:
        print(json.dumps({"code": int(resp.code), "name": Code.of(resp.code).name, "index": resp.index,
                          "message": resp.message, "leader_id": resp.local_id or resp.leader_id,
                          "voters": resp.voters, "learners": resp.learners}, indent=2, sort_keys=True))
    if resp.code != Code.SUCCESS:
        print(f"dledger member {args.action}: refused: {Code.of(resp.code).name} (code {resp.code})"
              + (f": {resp.message}" if resp.message else ""), file=sys.stderr)
        return 1
    if not args.json:
        how = f"entry {resp.index}" if resp.index >= 0 else resp.message
        print(f"{done} ({how}); {describe(resp.voters, resp.learners)}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    if not args.wait > 0:
        raise ValueError(f"--wait must be positive, got {args.wait:g}")
    with _client(args) as c:
        resp = c.add_member(args.id, args.address, learner_only=args.learner, timeout_s=args.wait)
    return _answer(args, resp, f"{args.id} added as a {'learner' if args.id in resp.learners else 'voter'}")


def cmd_promote(args: argparse.Namespace) -> int:
    with _client(args) as c:
        resp = c.promote(args.id)
    return _answer(args, resp, f"{args.id} promoted to voter")


def cmd_remove(args: argparse.Namespace) -> int:
    with _client(args) as c:
        resp = c.remove_member(args.id)
    return _answer(args, resp, f"{args.id} removed")


def member_lines(view: dict) -> list[str]:
    """``id address voter|learner match_index`` for each member (``-``: not known yet)."""
    return [f"{m['id']} {m['address']} {m['role']} {m['match_index'] if m['match_index'] >= 0 else '-'}"
            for m in view["members"]]


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        view = c.members()
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True))
    else:
        print("\n".join(member_lines(view)))
    return 0


__all__ = ["add_parser", "cmd_add", "cmd_list", "cmd_promote", "cmd_remove", "member_lines"]
