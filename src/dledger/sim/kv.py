"""A key-value register machine built on the log, and the record of its client operations.

Commands are log entry bodies (``encode_put``/``encode_cas``), each with a unique id, so the
commit-log checker also sees them as ordinary appends:

    kv <id> put <key> <value>
    kv <id> cas <key> <expected> <new>        (``-`` stands for "no value yet")

``KVStateMachine`` applies committed entries in index order (it is the server's
``state_machine``; a new process starts empty and replays the log). Bodies that are not
commands are ignored. It answers each command through ``ApplyEntry.resp``: ``True`` for a put,
whether it swapped for a cas, so ``DLedgerServer.write`` returns the leader's answer. It is a
``RecordingStateMachine``, so "applied once, in order" and "applied what the log holds" are
checked for it too.

A ``get`` is served from a node's applied state after a linearizable read: ``read(mode)`` gives
an index, the client waits until that node has applied up to it, then reads the key.

``KVRecorder`` keeps every client operation as a ``linearizability.Op`` for ``KVModel``:
- put/cas acknowledged SUCCESS: determinate (a cas with the leader's answer);
- put/cas failed with a code that guarantees nothing was appended: left out (no effect);
- anything else (timeout, crash, unknown code): indeterminate (``return_ms=None``);
- a get that never got its value (read failed, node died, gave up): left out (a read has no
  effect); a get through ``UNSAFE_READ`` is kept apart (``unsafe_gets``): that mode promises
  no freshness, so it is never checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from dledger.protocol import DLedgerResponseCode as Code
from dledger.sim.checkers import RecordingStateMachine
from dledger.sim.hash_chain import chain
from dledger.sim.history import DEFINITE_FAILURES
from dledger.sim.linearizability import CheckResult, KVModel, Op, Verdict, check

_NONE = "-"


def encode_put(op_id: int, key: str, value: str) -> bytes:
    return f"kv {op_id} put {key} {value}".encode()


def encode_cas(op_id: int, key: str, expected: str | None, new: str) -> bytes:
    return f"kv {op_id} cas {key} {_NONE if expected is None else expected} {new}".encode()


def decode(body: bytes) -> tuple | None:
    """``("put", key, value)`` / ``("cas", key, expected, new)``, or None for other bodies."""
    if not body.startswith(b"kv "):
        return None
    parts = body.decode("ascii", "replace").split(" ")
    if len(parts) == 5 and parts[2] == "put":
        return ("put", parts[3], parts[4])
    if len(parts) == 6 and parts[2] == "cas":
        return ("cas", parts[3], None if parts[4] == _NONE else parts[4], parts[5])
    return None


class KVStateMachine(RecordingStateMachine):
    """Registers by key; see the module docstring."""

    def __init__(self, node_id: str, problems: list[str] | None = None) -> None:
        super().__init__(node_id, problems if problems is not None else [])
        self.state: dict[str, str] = {}

    def apply_command(self, cmd: tuple) -> Any:
        if cmd[0] == "put":
            self.state[cmd[1]] = cmd[2]
            return True
        swapped = self.state.get(cmd[1]) == cmd[2]
        if swapped:
            self.state[cmd[1]] = cmd[3]
        return swapped

    def on_apply(self, entries) -> None:
        super().on_apply(entries)
        for a in entries:
            cmd = decode(bytes(a.entry.body))
            a.resp = None if cmd is None else self.apply_command(cmd)


class SnapshotKVStateMachine(KVStateMachine):
    """The key-value machine with snapshots (the swarm's ``--snapshots``): a snapshot holds its
    registers, the last index applied and a SHA-256 chain over every entry applied
    (``digests``: the chain after each index, as ``sim.hash_chain``), so that applied exactly
    once, in order, across snapshots and installs is checked exactly (``same_history``)."""

    def __init__(self, node_id: str, problems: list[str] | None = None) -> None:
        super().__init__(node_id, problems)
        self.digest = b"\0" * 32
        #: the chain after each index applied here (and after a loaded snapshot's index)
        self.states: dict[int, bytes] = {}

    def on_apply(self, entries) -> None:
        super().on_apply(entries)
        digest, states = self.digest, self.states
        for a in entries:
            digest = chain(digest, a.index, a.entry.body)
            states[a.index] = digest
        self.digest = digest

    def on_snapshot_save(self, writer) -> None:
        writer.write(msgpack.packb([self.last, self.digest, self.state]))

    def on_snapshot_load(self, reader) -> None:
        last, digest, state = msgpack.unpackb(reader.read())
        self.last, self.digest, self.state = last, digest, dict(state)
        self.states[last] = digest


@dataclass
class KVRecorder:
    """Client operations of the key-value machine, for the linearizability checker."""

    #: op id -> [input, output, call_ms, return_ms or None, client]; None return: indeterminate
    records: dict[int, list] = field(default_factory=dict)
    unsafe_gets: int = 0
    next_id: int = 0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def invoke(self, op_id: int, client: Any, input: tuple, now_ms: int) -> None:
        self.records[op_id] = [input, None, now_ms, None, client]

    def complete_write(self, op_id: int, now_ms: int, resp: Any, result: Any) -> None:
        """A put/cas answered: SUCCESS is determinate; a definite failure had no effect."""
        rec = self.records[op_id]
        if resp is None:
            return                                   # broken connection: indeterminate
        if resp.code == Code.SUCCESS:
            if rec[0][0] == "cas" and not isinstance(result, bool):
                return                               # succeeded, answer unknown: indeterminate
            rec[1] = result if rec[0][0] == "cas" else None
            rec[3] = now_ms
        elif resp.code in DEFINITE_FAILURES:
            del self.records[op_id]

    def complete_get(self, op_id: int, now_ms: int, value: str | None) -> None:
        rec = self.records[op_id]
        rec[1], rec[3] = value, now_ms

    def drop(self, op_id: int) -> None:
        """A get that got no value: it had no effect."""
        self.records.pop(op_id, None)

    def ops(self) -> list[Op]:
        out = []
        for _op_id, (input, output, call, ret, client) in sorted(self.records.items()):
            if input[0] == "get" and ret is None:
                continue                             # a get still waiting: no effect
            out.append(Op(client, input, output if ret is not None else None, call, ret))
        return out

    def check(self, max_steps_per_key: int = 200_000) -> Verdict:
        return check(KVModel(), self.ops(), max_steps_per_key=max_steps_per_key)


__all__ = ["CheckResult", "KVRecorder", "KVStateMachine", "decode", "encode_cas", "encode_put"]
