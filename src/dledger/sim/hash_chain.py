"""HashChainStateMachine: a state machine whose state proves what was applied, and in what order.

Its state is ``(applied, count, digest)``: the highest index applied, how many NORMAL entries,
and a SHA-256 chain over every one (``digest = sha256(digest || index || body)``). Two replicas
that applied the same entries in the same order, each exactly once, hold the same state at the
same ``applied``, however they got there: by applying the log, from a snapshot taken here, or
from one the leader installed. An entry applied twice, skipped or out of order changes the
digest from then on, so ``same_history`` finds it exactly; an index at or below ``applied``
handed to it again is reported at once (``problems``).

It saves and loads snapshots (``on_snapshot_save``/``on_snapshot_load``): the state, and
``padding`` bytes of filler to make a snapshot as large as a test wants, streamed in chunks.
"""

from __future__ import annotations

import hashlib
import struct

_STATE = struct.Struct(">qq32sq")      # applied, count, digest, padding size
_FILL = bytes(range(256)) * 256        # 64 KiB of filler


def chain(digest: bytes, index: int, body) -> bytes:
    """The chain's next link: the digest after applying entry ``index`` with ``body``."""
    return hashlib.sha256(digest + index.to_bytes(8, "big") + bytes(body)).digest()


class HashChainStateMachine:
    def __init__(self, node_id: str, problems: list[str] | None = None, *, padding: int = 0) -> None:
        self.node_id = node_id
        self.problems = problems if problems is not None else []
        self.padding = padding
        self.applied = -1
        self.count = 0
        self.digest = b"\0" * 32
        #: the digest after every entry applied (and after a loaded snapshot), for comparing histories
        self.states: dict[int, bytes] = {}
        self.snapshots_loaded: list[int] = []
        self.snapshots_saved: list[int] = []

    def on_apply(self, entries) -> None:
        digest, applied, states = self.digest, self.applied, self.states
        for a in entries:
            if a.index <= applied:
                self.problems.append(f"{self.node_id} was handed entry {a.index} after applying {applied}")
            applied = a.index
            digest = chain(digest, a.index, a.entry.body)
            self.count += 1
            states[applied] = digest
            a.resp = a.index
        self.digest, self.applied = digest, applied

    def on_snapshot_save(self, writer) -> None:
        writer.write(_STATE.pack(self.applied, self.count, self.digest, self.padding))
        left = self.padding
        while left > 0:
            n = min(left, len(_FILL))
            writer.write(_FILL[:n])
            left -= n
        self.snapshots_saved.append(self.applied)

    def on_snapshot_load(self, reader) -> None:
        head = reader.read(_STATE.size)
        if len(head) != _STATE.size:
            raise ValueError(f"{self.node_id}: a snapshot of {len(head)} bytes holds no state")
        applied, count, digest, padding = _STATE.unpack(head)
        left = padding
        while left > 0:
            chunk = reader.read(min(left, 1 << 20))
            if not chunk:
                raise ValueError(f"{self.node_id}: the snapshot's filler ends {left} bytes short")
            left -= len(chunk)
        self.applied, self.count, self.digest = applied, count, digest
        self.states[applied] = digest
        self.snapshots_loaded.append(applied)

    def on_shutdown(self) -> None:
        pass


def same_history(machines: dict[str, HashChainStateMachine]) -> list[str]:
    """Problems where two machines hold different digests at the same applied index."""
    problems = []
    seen: dict[int, tuple[str, bytes]] = {}
    for node_id, sm in sorted(machines.items()):
        for index, digest in sm.states.items():
            other = seen.setdefault(index, (node_id, digest))
            if other[1] != digest:
                problems.append(f"{node_id} and {other[0]} hold different states after entry {index}")
    return problems


__all__ = ["HashChainStateMachine", "chain", "same_history"]
