"""Transcripts: scenario tests for the core, written as a story of commands and what happened.

A transcript file (``tests/core/testdata/*.txt``, in the style of etcd-io/raft's ``testdata``)
is a sequence of commands, each followed by ``----`` and the output it produced, then a blank
line. Lines starting with ``#`` (outside an output block) and blank lines are kept verbatim
(the format: ``helpers/transcripts.py``).
``test_transcripts.py`` replays every file and compares; ``pytest --update-goldens`` rewrites
the files with the actual output (then read the diff before committing it).

The cluster is ``core.wiring.Wired`` (real ``Node`` objects on memory stores, explicit time),
with one difference: a message is never delivered by itself. Every envelope a node hands back
goes into one queue, and only ``deliver``/``stabilize``/``run`` take it out. Time moves only
by ``advance``, ``tick`` and ``run``. Nothing else is random: the nodes' ``random.Random`` come
from the cluster's seed, so a transcript replays byte for byte.

Commands (``a->b`` selects a link; ``*`` is any node; ``type=`` a message class such as
``VoteRequest`` or a push type such as ``COMPARE``; ``count=k`` only the first k matches;
``skip=k`` all but the first k matches, which stay queued)::

    cluster n=3 seed=1 [fresh=true] [config_field=value ...]   a cluster; every node starts
                                 (its store is not suspect; ``fresh=true``: every store is new,
                                 ``FRESH``, and each member first relearns its term)
    advance ms=N                 move time by N ms, ticking every running node at its deadlines
                                 (a deadline at the current time fires first: ms=0 fires only those)
    tick n1 [n2] ms=N            the same, but only the named nodes tick (the others are
                                 paused: their timers fire late, on their next tick)
    run ms=N                     normal operation: N ms with every message delivered at once;
                                 prints only role changes and completions, with their times
    deliver [a->b] [type=X] [skip=k] [count=k]   deliver the queued messages selected (all by default);
                                 what they cause is printed under them and queued, not delivered
    stabilize                    deliver until the queue is empty
    drop [a->b] [type=X] [count=k]      lose queued messages
    dup [a->b] [type=X] [count=k]       duplicate queued messages (the copy waits right behind)
    queue                        list the queued messages
    send a->b Class field=value ...     queue a hand-made request (group, ids filled in)
    propose n0 body [body ...]   one append of these bodies (token append#k)
    read n0 MODE                 a read (READ_INDEX_READ, LEASE_READ, ...; token read#k)
    transfer n0 -> n2            a leadership transfer asked of n0 (token transfer#k)
    crash n2 / restart n2 [wiped] [suspect=REASON [lose=K]]   stop a node (its store survives)
                                 / start it again (``wiped``: with an empty, FRESH store, as
                                 after a lost disk; ``suspect=UNCLEAN_SHUTDOWN lose=2``: its
                                 store marked suspect and without its last 2 entries, as after
                                 a power loss in page_cache mode; ``suspect=NONE``: not suspect)
    partition n0 | n1 n2         messages between the groups are lost when delivered; nodes
                                 not named reach everyone
    heal                         no partition
    status                       per node: role, term, vote, leader, log end (term,index),
                                 commit and applied index
    log n1                       n1's entries

Output lines: a message is ``src->dst Class fields`` (log positions as ``(term,index)``), a
role change ``n1 becomes LEADER term=2 (vote won)`` (with the event that caused it), a
completion ``n0 completes append#3 SUCCESS index=4 pos=192``. What a stimulus (a delivered message, a tick) caused is indented under it.
"""

from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.wiring import Wired
from dledger import protocol
from dledger.core import Role
from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, PushEntryType, ReadMode,
                              VoteResult)
from dledger.store import DLedgerMemoryStore
from dledger.store.suspect import SuspectReason
from helpers.transcripts import Command, TranscriptError, parse, render

MAX_DELIVERIES = 100_000


def run_text(text: str, name: str = "<transcript>") -> str:
    """Run every command of a transcript; return the transcript with the actual output."""
    items = parse(text, name)
    interp = Interpreter()
    outputs = {}
    for item in items:
        if isinstance(item, Command):
            try:
                outputs[id(item)] = interp.execute(item.line)
            except TranscriptError as exc:
                raise TranscriptError(f"{name}:{item.lineno}: {item.line}: {exc}") from None
    return render(items, outputs)


def run_file(path: Path) -> str:
    return run_text(path.read_text(), path.name)


# =========================================================================================
# how things print
# =========================================================================================
def code_name(code: int) -> str:
    return Code.of(code).name


def pos(term: int, index: int) -> str:
    return f"({term},{index})"


def format_msg(msg) -> str:
    name = type(msg).__name__
    flag = " recovering" if getattr(msg, "recovering", False) else ""
    if isinstance(msg, protocol.VoteRequest):
        s = f"{name} term={msg.term} last={pos(msg.ledger_end_term, msg.ledger_end_index)}"
        s = s + " transfer" if msg.leadership_transfer else s
        return s + " unanimous" if msg.unanimous else s
    if isinstance(msg, protocol.VoteResponse):
        s = f"{name} term={msg.term} {VoteResult(msg.vote_result).name}"
        return (s if msg.code == Code.SUCCESS else f"{s} {code_name(msg.code)}") + flag
    if isinstance(msg, protocol.MetadataRequest):
        return name
    if isinstance(msg, protocol.MetadataResponse):
        return f"{name} term={msg.term} end={msg.ledger_end_index} vote={msg.vote_for or '-'}"
    if isinstance(msg, protocol.HeartBeatRequest):
        return f"{name} term={msg.term} commit={msg.commit_index}"
    if isinstance(msg, protocol.PushEntryRequest):
        kind = PushEntryType(msg.type)
        s = f"{name} {kind.name} term={msg.term}"
        if kind is PushEntryType.APPEND:
            s += f" entries={msg.first_entry_index}..{msg.last_entry_index}"
        elif kind is PushEntryType.COMPARE:
            s += f" pre={pos(msg.pre_log_term, msg.pre_log_index)}"
        elif kind is PushEntryType.TRUNCATE:
            s += f" from={msg.pre_log_index}"
        return s + f" commit={msg.commit_index}"
    if isinstance(msg, protocol.PushEntryResponse):
        kind = PushEntryType(msg.type)
        s = f"{name} {kind.name} {code_name(msg.code)} term={msg.term}"
        if kind is PushEntryType.APPEND:
            s += f" entries={msg.index}..{msg.index + msg.count - 1}"
        elif kind is not PushEntryType.COMMIT:
            s += f" index={msg.index}"
        s += f" end={msg.end_index}"
        return (s + f" x={pos(msg.x_term, msg.x_index)}" if msg.x_term != -1 else s) + flag
    if isinstance(msg, protocol.LeadershipTransferRequest):
        return (f"{name} term={msg.term} transferee={msg.transferee_id} "
                f"take_index={msg.take_leadership_ledger_index}")
    s = f"{name} {code_name(msg.code)}"
    return (s + f" term={msg.term}" if msg.term >= 0 else s) + flag


def format_envelope(env: Envelope) -> str:
    return f"{env.src}->{env.dst} {format_msg(env.msg)}"


def format_completion(node_id: str, completion) -> str:
    r = completion.response
    s = f"{node_id} completes {completion.token} {code_name(r.code)}"
    if r.code != Code.SUCCESS:
        return s + f" leader={r.leader_id}" if r.leader_id else s
    if isinstance(r, protocol.AppendEntryResponse):
        s += f" index={r.index}"
        if str(completion.token).startswith("append#"):
            s += f" pos={r.pos}"
    else:
        s += f" term={r.term}"
    return s + f" result={completion.result!r}" if completion.result is not None else s


def format_body(body: bytes) -> str:
    text = bytes(body).decode("ascii", "replace")
    return text if text.isprintable() and text and " " not in text else repr(bytes(body))


def parse_value(text: str):
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*", text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    return text


# =========================================================================================
# the cluster
# =========================================================================================
class TranscriptCluster(Wired):
    """``Wired`` whose queue is only emptied by command, and which narrates what happens."""

    def __init__(self, n: int, seed: int, **cfg) -> None:
        self.out: list[str] = []
        self.indent = ""
        self.quiet = False                 # run: only role changes and completions, timed
        self.groups: dict[str, int] = {}
        self.deadline: dict[str, int | None] = {}   # from each node's last Ready
        super().__init__(n, seed, start=False, **cfg)
        for node_id in self.ids:
            self.start(node_id)

    # -- narration ------------------------------------------------------------------------
    def emit(self, text: str, *, message: bool = False) -> None:
        if self.quiet:
            if not message:
                self.out.append(f"@{self.now} {text}")
        else:
            self.out.append(self.indent + text)

    @contextmanager
    def under(self, header: str | None):
        """Indent what happens inside; with a header, print it only if anything happened."""
        mark, indent = len(self.out), self.indent
        if not self.quiet:
            self.indent = indent + "  "
        try:
            yield
        finally:
            self.indent = indent
        if header is not None and len(self.out) > mark and not self.quiet:
            self.out.insert(mark, indent + header)

    def _collect(self, node) -> None:
        ready = node.take_ready()
        node_id = node.self_id
        self.deadline[node_id] = ready.next_deadline_ms
        for change in ready.role_changes:
            self.role_changes[node_id].append(change)
            s = f"{node_id} becomes {change.role.value} term={change.term}"
            if change.role is Role.FOLLOWER:
                s += f" leader={change.leader_id}"
            self.emit(f"{s} ({change.event})")
        for env in ready.messages:
            self.queue.append(env)
            self.emit(format_envelope(env), message=True)
        for c in ready.completions:
            self.completions[c.token] = c
            self.emit(format_completion(node_id, c))

    # -- the network ----------------------------------------------------------------------
    def lost_because(self, env: Envelope) -> str | None:
        if env.dst not in self.nodes:
            return f"{env.dst} is down"
        g = self.groups
        if env.src in g and env.dst in g and g[env.src] != g[env.dst]:
            return "partitioned"
        return None

    def deliver_envelope(self, env: Envelope) -> None:
        reason = self.lost_because(env)
        if reason is not None:
            self.emit(f"{format_envelope(env)} (lost: {reason})", message=True)
            return
        node = self.nodes[env.dst]
        self.emit(format_envelope(env), message=True)
        with self.under(None):
            node.receive(self.now, env)
            self._collect(node)

    def deliver_all(self) -> None:
        for _ in range(MAX_DELIVERIES):
            if not self.queue:
                return
            self.deliver_envelope(self.queue.popleft())
        raise TranscriptError(f"the queue did not drain after {MAX_DELIVERIES} deliveries")

    # -- time -----------------------------------------------------------------------------
    def advance(self, ms: int, only: list[str] | None = None, deliver: bool = False) -> None:
        """Move time by ``ms``, ticking each node when its last ``Ready.next_deadline_ms``
        has come (as ``Wired.step`` would, one millisecond at a time, but jumping over the
        milliseconds where nothing is due)."""
        end = self.now + ms
        if deliver:
            self.deliver_all()
        last = self.now - 1               # a deadline at the current time fires first
        while True:
            ticking = [i for i in self.ids if i in self.nodes and (only is None or i in only)]
            deadlines = [d for d in map(self.deadline.get, ticking) if d is not None]
            if not deadlines:
                break
            t = max(last + 1, min(deadlines))
            if t > end:
                break
            self.now = last = t
            for node_id in ticking:
                d = self.deadline.get(node_id)
                if d is not None and d <= t and node_id in self.nodes:
                    node = self.nodes[node_id]
                    with self.under(f"@{t} {node_id} tick"):
                        node.tick(t)
                        self._collect(node)
            if deliver:
                self.deliver_all()
        self.now = end


# =========================================================================================
# the commands
# =========================================================================================
LINK = re.compile(r"^(\S+)->(\S+)$")


@dataclass
class Selector:
    src: str = "*"
    dst: str = "*"
    type: str | None = None
    count: int | None = None
    skip: int = 0

    def matches(self, env: Envelope) -> bool:
        if self.src not in ("*", env.src) or self.dst not in ("*", env.dst):
            return False
        if self.type is None:
            return True
        names = {type(env.msg).__name__}
        if isinstance(env.msg, (protocol.PushEntryRequest, protocol.PushEntryResponse)):
            kind = PushEntryType(env.msg.type).name
            names |= {kind, f"{type(env.msg).__name__}:{kind}"}
        return self.type in names


class Interpreter:
    def __init__(self) -> None:
        self.c: TranscriptCluster | None = None
        self.tokens = {"append": 0, "read": 0, "transfer": 0}
        self.rid = 1 << 40

    def execute(self, line: str) -> list[str]:
        words = re.sub(r"\s*->\s*", "->", line.strip()).split()
        name, args = words[0], words[1:]
        handler = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if handler is None:
            raise TranscriptError(f"unknown command {name!r}")
        if name != "cluster" and self.c is None:
            raise TranscriptError("start with a 'cluster' command")
        if self.c is not None:
            self.c.out = []
        out = handler(args)
        return out if out is not None else self.c.out

    # -- argument helpers -----------------------------------------------------------------
    @staticmethod
    def options(args: list[str]) -> tuple[list[str], dict[str, str]]:
        plain, opts = [], {}
        for a in args:
            if "=" in a:
                k, v = a.split("=", 1)
                opts[k] = v
            else:
                plain.append(a)
        return plain, opts

    def node_id(self, word: str, *, running: bool = True) -> str:
        c = self.c
        if word not in c.ids:
            raise TranscriptError(f"no node {word!r} (nodes: {' '.join(c.ids)})")
        if running and word not in c.nodes:
            raise TranscriptError(f"{word} is down")
        return word

    def ms(self, opts: dict[str, str]) -> int:
        if "ms" not in opts:
            raise TranscriptError("needs ms=N")
        return int(opts.pop("ms"))

    def selector(self, args: list[str]) -> Selector:
        plain, opts = self.options(args)
        sel = Selector()
        for word in plain:
            m = LINK.match(word)
            if not m:
                raise TranscriptError(f"expected a link like n0->n1, got {word!r}")
            sel.src, sel.dst = m.groups()
            for end in (sel.src, sel.dst):
                if end != "*":
                    self.node_id(end, running=False)
        sel.type = opts.pop("type", None)
        if "count" in opts:
            sel.count = int(opts.pop("count"))
        if "skip" in opts:
            sel.skip = int(opts.pop("skip"))
        if opts:
            raise TranscriptError(f"unknown options {sorted(opts)}")
        return sel

    def take(self, sel: Selector) -> list[Envelope]:
        """Remove and return the queued envelopes ``sel`` picks, in queue order."""
        picked, kept, skipped = [], [], 0
        for env in self.c.queue:
            if sel.matches(env) and skipped < sel.skip:
                skipped += 1
                kept.append(env)
            elif sel.matches(env) and (sel.count is None or len(picked) < sel.count):
                picked.append(env)
            else:
                kept.append(env)
        self.c.queue.clear()
        self.c.queue.extend(kept)
        return picked

    def token(self, kind: str) -> str:
        self.tokens[kind] += 1
        return f"{kind}#{self.tokens[kind]}"

    # -- commands -------------------------------------------------------------------------
    def cmd_cluster(self, args):
        _plain, opts = self.options(args)
        n, seed = int(opts.pop("n", 3)), int(opts.pop("seed", 1))
        self.tokens = dict.fromkeys(self.tokens, 0)
        self.c = TranscriptCluster(n, seed, **{k: parse_value(v) for k, v in opts.items()})
        return self.c.out

    def cmd_advance(self, args):
        _plain, opts = self.options(args)
        self.c.advance(self.ms(opts))

    def cmd_tick(self, args):
        plain, opts = self.options(args)
        self.c.advance(self.ms(opts), only=[self.node_id(w) for w in plain])

    def cmd_run(self, args):
        _plain, opts = self.options(args)
        c = self.c
        c.quiet = True
        try:
            c.advance(self.ms(opts), deliver=True)
        finally:
            c.quiet = False

    def cmd_deliver(self, args):
        for env in self.take(self.selector(args)):
            self.c.deliver_envelope(env)

    def cmd_stabilize(self, args):
        if args:
            raise TranscriptError("stabilize takes no arguments")
        self.c.deliver_all()

    def cmd_drop(self, args):
        for env in self.take(self.selector(args)):
            self.c.emit(f"{format_envelope(env)} (dropped)")

    def cmd_dup(self, args):
        sel = self.selector(args)
        out, copies, skipped = [], 0, 0
        for env in self.c.queue:
            out.append(env)
            if sel.matches(env) and skipped < sel.skip:
                skipped += 1
            elif sel.matches(env) and (sel.count is None or copies < sel.count):
                copies += 1
                out.append(dataclasses.replace(env, msg=dataclasses.replace(env.msg)))
                self.c.emit(f"{format_envelope(env)} (copied)")
        self.c.queue.clear()
        self.c.queue.extend(out)

    def cmd_queue(self, args):
        return [format_envelope(env) for env in self.c.queue]

    def cmd_send(self, args):
        if len(args) < 2 or not LINK.match(args[0]):
            raise TranscriptError("send a->b Class field=value ...")
        src, dst = LINK.match(args[0]).groups()
        self.node_id(src, running=False)
        self.node_id(dst, running=False)
        cls = getattr(protocol, args[1], None)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TranscriptError(f"no message class {args[1]!r}")
        _plain, opts = self.options(args[2:])
        fields = dict(group=self.c.cfg["group"], local_id=src, remote_id=dst, leader_id=src)
        fields.update({k: parse_value(v) for k, v in opts.items()})
        if isinstance(fields.get("type"), str):
            fields["type"] = PushEntryType[fields["type"]]
        try:
            msg = cls(**fields)
        except TypeError as exc:
            raise TranscriptError(str(exc)) from None
        self.rid += 1
        env = Envelope(src, dst, self.rid, cls.__name__.endswith("Response"), msg)
        self.c.queue.append(env)
        self.c.emit(format_envelope(env))

    def cmd_propose(self, args):
        if len(args) < 2:
            raise TranscriptError("propose n0 body [body ...]")
        node = self.c.nodes[self.node_id(args[0])]
        node.propose(self.c.now, self.token("append"), [w.encode() for w in args[1:]])
        self.c._collect(node)

    def cmd_read(self, args):
        if len(args) != 2 or args[1] not in ReadMode.__members__:
            raise TranscriptError(f"read n0 MODE ({' '.join(ReadMode.__members__)})")
        node = self.c.nodes[self.node_id(args[0])]
        node.read(self.c.now, self.token("read"), ReadMode[args[1]])
        self.c._collect(node)

    def cmd_transfer(self, args):
        if len(args) != 1 or not LINK.match(args[0]):
            raise TranscriptError("transfer n0 -> n2")
        src, dst = LINK.match(args[0]).groups()
        node = self.c.nodes[self.node_id(src)]
        node.transfer_leadership(self.c.now, self.token("transfer"), dst)
        self.c._collect(node)

    def cmd_crash(self, args):
        for word in args:
            self.c.stop(self.node_id(word))

    def cmd_restart(self, args):
        plain, opts = self.options(args)
        if not plain or plain[1:] not in ([], ["wiped"]) or set(opts) - {"suspect", "lose"}:
            raise TranscriptError("restart n2 [wiped] [suspect=REASON [lose=K]]")
        node_id = self.node_id(plain[0], running=False)
        if node_id in self.c.nodes:
            raise TranscriptError(f"{node_id} is running")
        if plain[1:] == ["wiped"]:
            self.c.stores[node_id] = DLedgerMemoryStore(data_file_size=1 << 20)
        if "suspect" in opts:
            store = self.c.stores[node_id]
            lose = int(opts.get("lose", 0))         # the last K entries never reached the disk
            if lose:
                store.truncate(store.ledger_end_index - lose + 1)
            store.suspect = None if opts["suspect"] == "NONE" else SuspectReason[opts["suspect"]]
        self.c.start(node_id)

    def cmd_partition(self, args):
        groups: dict[str, int] = {}
        for k, part in enumerate(" ".join(args).split("|")):
            for word in part.split():
                groups[self.node_id(word, running=False)] = k
        self.c.groups = groups

    def cmd_heal(self, args):
        self.c.groups = {}

    def cmd_status(self, args):
        c = self.c
        lines = [f"t={c.now}"]
        for node_id in c.ids:
            store = c.stores[node_id]
            end = pos(store.ledger_end_term, store.ledger_end_index)
            node = c.nodes.get(node_id)
            if node is None:
                lines.append(f"{node_id} down end={end}")
                continue
            lines.append(f"{node_id} {node.role.value} term={node.term} vote={store.vote_for or '-'} "
                         f"leader={node.leader_id or '-'} end={end} commit={node.committed_index} "
                         f"applied={node.applied_index}")
        return lines

    def cmd_log(self, args):
        if len(args) != 1:
            raise TranscriptError("log n1")
        store = self.c.stores[self.node_id(args[0], running=False)]
        lines = []
        for index in range(store.ledger_before_begin_index + 1, store.ledger_end_index + 1):
            e = store.get(index)
            kind = {MAGIC_NORMAL: "", MAGIC_NOOP: "NOOP"}.get(e.magic, f"magic={e.magic}")
            body = format_body(e.body) if e.magic == MAGIC_NORMAL else kind
            lines.append(f"{pos(e.term, e.index)} pos={e.pos} {body}")
        return lines or ["(empty)"]
