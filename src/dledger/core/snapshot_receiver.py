"""SnapshotReceiver: the follower's side of a streamed InstallSnapshot (a state machine's snapshot).

A leader whose log no longer holds what a follower with a state machine needs next (its log
was trimmed after a snapshot), or whose follower says it cannot rebuild its state from its own
log (SNAPSHOT_NEEDED), streams its newest snapshot in chunks (``InstallSnapshotRequest`` with
``total_size`` >= 0; the leader's side is ``core.install_dispatch``). Here:

- each chunk is appended, fsynced, to the snapshot being received
  (``FileSnapshotStore.begin_install``: the same snapshot resumes where its durable bytes end,
  after a broken connection or a restart; another one starts afresh). A chunk at another offset
  writes nothing; every answer names ``received``, where the next chunk must start. A chunk
  that fails its CRC is refused (INSTALL_SNAPSHOT_ERROR) and sent again;
- with the last chunk the whole snapshot is checked against the leader's size and CRC (a
  mismatch discards it: the install starts again from 0); then the log start moves
  (``core.log_start.move_log_start``: a follower that holds the snapshot's last entry with its
  term keeps its log; otherwise it drops it and begins after the snapshot, at the leader's
  positions); then the snapshot is put in place and loaded into the state machine, and applying
  goes on after its index (``StateMachineCaller.restored``). A crash between those steps leaves
  a log that begins after the snapshot and the received data complete: the node restarts
  needing a snapshot, the leader sends the same one again, and it is finished at once;
- every entry applied before the install stays applied once: the state machine's state is
  replaced by the snapshot's, which holds every entry up to its index exactly once, and only
  entries after it are applied from then on.

Loading runs on the node's thread (the follower applies nothing meanwhile, and it has nothing to
serve from its state until it is done).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dledger.core import log_start
from dledger.errors import CorruptSnapshotError, DLedgerError, PeerProtocolError
from dledger.protocol import DLedgerResponseCode as Code, InstallSnapshotRequest
from dledger.snapshot import FileSnapshotStore, InstallOffsetError, InstallTarget, SnapshotMeta

if TYPE_CHECKING:
    from dledger.core.state_machine_caller import StateMachineCaller
    from dledger.store import LogStore

log = logging.getLogger(__name__)


def check_chunk(req: InstallSnapshotRequest) -> None:
    """``PeerProtocolError`` for a chunk no leader sends."""
    if req.offset < 0 or req.data_crc < 0 or req.offset + len(req.data) > req.total_size:
        raise PeerProtocolError(f"install from {req.leader_id}: a chunk of {len(req.data)} bytes at offset "
                                f"{req.offset} of a {req.total_size}-byte snapshot (CRC {req.data_crc})")


class SnapshotReceiver:
    def __init__(self, store: "LogStore", files: FileSnapshotStore | None, caller: "StateMachineCaller") -> None:
        self.store = store
        #: this node's snapshots (None: it takes none, and refuses installs of snapshots)
        self.files = files
        self.caller = caller
        self._target: InstallTarget | None = None

    def receive(self, req: InstallSnapshotRequest, keep: int) -> tuple[int, int]:
        """Take one chunk; returns (the answer's code, the bytes received). ``keep``: the
        highest index this follower verified or committed (see ``log_start``)."""
        log_start.check_install(req)
        check_chunk(req)
        if self.files is None or self.caller.state_machine is None:
            log.error("leader %s sends a snapshot, but this node has no state machine that loads "
                      "snapshots: refused", req.leader_id)
            return Code.INSTALL_SNAPSHOT_ERROR, -1
        meta = SnapshotMeta(req.last_included_index, req.last_included_term, req.total_size, req.data_crc)
        target = self._target
        try:
            if target is None or target.meta != meta:
                target = self._target = self.files.begin_install(meta)
                if target.received:
                    log.info("resuming the install of the leader's %s at byte %d of %d", meta,
                             target.received, req.total_size)
                else:
                    log.warning("receiving the leader's %s (%d bytes) from %s", meta, req.total_size, req.leader_id)
            if req.offset == target.received and not target.complete:
                target.write_chunk(req.offset, req.data, req.chunk_crc)
        except InstallOffsetError:
            pass                                   # answered with ``received``: the leader goes there
        except CorruptSnapshotError as exc:
            log.warning("install chunk refused: %s", exc)
            return Code.INSTALL_SNAPSHOT_ERROR, target.received if target is not None else 0
        except OSError as exc:
            log.error("cannot write the leader's %s: %s", meta, exc)
            self._target = None
            return Code.INSTALL_SNAPSHOT_ERROR, 0
        if not target.complete:
            return Code.SUCCESS, target.received
        return self._finish(req, target, keep)

    def _finish(self, req: InstallSnapshotRequest, target: InstallTarget, keep: int) -> tuple[int, int]:
        meta = target.meta
        try:
            target.verify()
        except CorruptSnapshotError as exc:
            log.error("the leader's %s arrived damaged and is received again: %s", meta, exc)
            self._target = None
            return Code.INSTALL_SNAPSHOT_ERROR, 0
        index, term = meta.last_included_index, meta.last_included_term
        store = self.store
        before = (store.ledger_before_begin_index, store.ledger_end_index)
        try:
            moved = log_start.move_log_start(store, index, term, req.next_pos, keep)
        except DLedgerError as exc:
            log.warning("refused to install the leader's %s: %s", meta, exc)
            return exc.code, target.received
        if moved:
            held = (f"entries {before[0] + 1}..{before[1]}" if before[1] > before[0]
                    else "no entries" if before[0] < 0 else f"no entries (it began after {before[0]})")
            log.warning("log start moved to the leader's snapshot: this log held %s, now begins after %d "
                        "(term %d), its next entry at position %d", held, index, term, req.next_pos)
        try:
            installed = target.finish(verified=True)
        except (OSError, CorruptSnapshotError) as exc:
            log.error("cannot put the leader's %s in place: %s", meta, exc)
            self._target = None
            return Code.INSTALL_SNAPSHOT_ERROR, 0
        self._target = None
        caller = self.caller
        if caller.applied_index >= index and not caller.needs_snapshot and caller.error is None:
            log.info("kept the leader's %s; this state machine already holds entry %d", installed, index)
            return Code.SUCCESS, meta.data_size
        try:
            with self.files.open_reader(installed) as reader:
                caller.state_machine.on_snapshot_load(reader)
        except Exception as exc:                 # the host's code failed: stop applying, say so
            caller.error = exc
            log.error("the state machine failed loading %s: %r; applying stops until a restart", installed, exc)
            return Code.LOAD_SNAPSHOT_ERROR, meta.data_size
        caller.restored(index)
        log.warning("installed the leader's %s: applying goes on after entry %d", installed, index)
        return Code.SUCCESS, meta.data_size


__all__ = ["SnapshotReceiver", "check_chunk"]
