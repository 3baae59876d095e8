"""InstallDispatch: the leader's installs, the part of replication that brings a follower
forward when this leader no longer holds what it needs next.

A follower whose next entry lies at or below this leader's before-begin index (retention
deleted its segment, ``store.clean``; or the log's head was reset, ``store.reset``) cannot be
pushed to. Its dispatcher takes ``BEHIND_BEGIN`` to INSTALL_SNAPSHOT
(``core.follower_progress``), and while it is there the pusher hands it to this part:

- **when** (``needed``): a COMPARE due at or below the begin (this leader holds only the
  begin's term there, not its position), a TRUNCATE whose match is below it. The pusher's
  APPEND loop checks the same bound inline, once per push, to keep that path cheap;
- **what** (``dispatch``): for a commit log, the install that moves the follower's log start
  to this leader's (``core.log_start.install_request``: an ``InstallSnapshotRequest`` that
  carries no snapshot). A leader whose log holds nothing after its begin yet, or whose store
  cannot be read, sends nothing and tries again after ``max_push_timeout_ms``;
- **one in flight** per follower: an install is the progress's outstanding control request
  (``control_sent``, its answer matched by ``control_seq``), as a COMPARE; the pusher gives an
  unanswered one up after ``max_push_timeout_ms`` and this part sends it again;
- **the answer** (``on_answer``), once the pusher has judged it (still this leadership's, the
  one the outstanding request waits for, sound for a recovering follower, as for a COMPARE):
  SUCCESS takes ``INSTALLED`` to TRUNCATE with the match at the begin, then pushes go on as
  usual; a refusal takes ``INSTALL_REFUSED`` back to COMPARE from this leader's end, after a
  heartbeat interval (or ``max_push_timeout_ms`` for INSTALL_SNAPSHOT_ERROR: a follower with a
  state machine refuses until snapshots exist). A run of the same refusal from one follower
  is logged once.

A leader whose state machine takes snapshots (``snapshots``: its ``FileSnapshotStore``) sends
its newest snapshot instead, streamed (the follower's side: ``core.snapshot_receiver``):

- one chunk of at most ``SNAPSHOT_CHUNK`` bytes (and what a frame carries beside the
  envelope's ``FRAME_HEADROOM``) per request, with
  its CRC and the whole snapshot's size and CRC, read from the snapshot's file as it is sent
  (nothing is held whole); the chunk is the one outstanding install, so one install runs per
  follower and a lost chunk is sent again after ``max_push_timeout_ms``;
- each answer names the bytes the follower holds durably (``received``): the next chunk
  starts there, so an install resumes after a broken connection, a lost answer or a restart
  of either side (the same snapshot: a newer one starts the follower afresh); the follower's
  last answer, with every byte received and the snapshot loaded, is ``INSTALLED`` as above;
- a follower that answers a push SNAPSHOT_NEEDED (it cannot rebuild its state from its own
  log) is taken to INSTALL_SNAPSHOT by the pusher too;
- with no snapshot yet (or one older than this leader's log start, or than the follower's log
  start: it refuses that one), ``snapshot_wanted`` asks the server's snapshotter to take one; meanwhile the bare log-start move is sent, which a
  follower that holds this leader's begin entry (same term) takes without losing anything (its
  state machine skips nothing), and others refuse until the snapshot comes.

State: the member state, the store, the config, the snapshots, the offset of each follower's
transfer, and the last refusal logged per follower.
It returns its intents (``Send``, with an ``InstallSent`` context); it never compares a term a
peer sent (the pusher's common answer handling and ``core.term_gate`` do).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from dledger.config import FRAME_HEADROOM
from dledger.core.follower_progress import DispatchState, FollowerProgress, retry_delay
from dledger.core.intents import Send
from dledger.core.log_start import install_request
from dledger.core.member_state import MemberState
from dledger.entry import crc32, decode_header
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, InstallSnapshotRequest, InstallSnapshotResponse

if TYPE_CHECKING:
    from dledger.snapshot import FileSnapshotStore
    from dledger.store import LogStore

#: the pusher's logger: the install lines keep the name operators know (docs/operations.md)
log = logging.getLogger("dledger.core.entry_pusher")


#: the largest snapshot chunk in one install request
SNAPSHOT_CHUNK = 1 << 20


class InstallSent(NamedTuple):
    """An install of the log start after ``index`` sent to ``pr`` in leadership ``term``; its
    answer counts only while ``seq`` is the progress's ``control_seq``. A snapshot's chunk
    names its ``offset`` (-1: no snapshot) and the snapshot's ``size``."""

    pr: FollowerProgress
    seq: int
    term: int
    index: int
    offset: int = -1
    size: int = -1


class InstallDispatch:
    def __init__(self, member_state: MemberState, store: "LogStore", config,
                 snapshots: "FileSnapshotStore | None" = None) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        #: this leader's snapshots (None: a commit log, whose installs move the log start only)
        self.snapshots = snapshots
        #: the last refusal code of an install logged per follower (one line per streak)
        self._refusals: dict[str, int] = {}
        #: per follower: (the snapshot's index, the offset of its next chunk)
        self._transfers: dict[str, tuple[int, int]] = {}
        #: a follower waits for a snapshot and there is none to send: take one
        self.snapshot_wanted = False
        self.chunk = max(1, min(SNAPSHOT_CHUNK, config.max_frame_bytes - FRAME_HEADROOM))

    def needed(self, pr: FollowerProgress) -> bool:
        """Whether the COMPARE or TRUNCATE due to ``pr`` needs an entry at or below this
        leader's before-begin index, which it no longer holds."""
        begin = self.store.ledger_before_begin_index
        state = pr.state
        return begin >= 0 and (state is DispatchState.COMPARE and pr.next - 1 <= begin
                               or state is DispatchState.TRUNCATE and pr.match < begin)

    def dispatch(self, now: int, pr: FollowerProgress, term: int) -> list[Send]:
        """The install that moves ``pr``'s log start to this leader's (of leadership ``term``),
        or nothing yet (``pr`` paused). Each names the configuration in force at its index
        (``core.membership_sync``: the follower's log will not hold the entry that made it)."""
        sends = self._dispatch(now, pr, term)
        for send in sends:
            req = send.msg
            config = self.member_state.history.at(req.last_included_index)
            if config is not None:
                req.config, req.config_index, req.config_term = config.encode(), config.index, config.term
        return sends

    def _dispatch(self, now: int, pr: FollowerProgress, term: int) -> list[Send]:
        if self.snapshots is not None:
            return self._dispatch_chunk(now, pr, term)
        me, cfg = self.member_state.self_id, self.cfg
        try:
            req = install_request(self.member_state, self.store, pr.peer, term,
                                  pr.incarnation if pr.recovering else 0)
        except DLedgerError as exc:
            log.warning("%s: cannot read its first entry for %s: %s", me, pr.peer, exc)
            pr.pause_until(now + cfg.max_push_timeout_ms)
            return []
        if isinstance(req, str):
            log.info("%s: %s needs entries before this leader's log begins, but no install yet: %s", me, pr.peer, req)
            pr.pause_until(now + cfg.max_push_timeout_ms)
            return []
        log.info("%s: %s needs entries this leader no longer holds (its log begins after %d, term %d): moving "
                 "its log start there, next entry at position %d", me, pr.peer, req.last_included_index,
                 req.last_included_term, req.next_pos)
        seq = pr.control_sent(now)
        return [Send(pr.peer, req, InstallSent(pr, seq, term, req.last_included_index))]

    # -- snapshots -------------------------------------------------------------------------------
    def _dispatch_chunk(self, now: int, pr: FollowerProgress, term: int) -> list[Send]:
        me, cfg, store = self.member_state.self_id, self.cfg, self.store
        meta = next(self.snapshots.metas(), None)
        begin = store.ledger_before_begin_index
        if meta is None or meta.last_included_index < begin or not meta.checked:
            why = "no snapshot here" if meta is None else f"the newest, {meta}, cannot be sent"
            log.info("%s: %s needs this leader's snapshot, but %s yet: one is taken; meanwhile its log "
                     "start is moved if it holds this leader's begin", me, pr.peer, why)
            self.snapshot_wanted = True
            try:
                req = install_request(self.member_state, store, pr.peer, term, pr.incarnation if pr.recovering else 0)
            except DLedgerError:
                req = "unreadable"
            if isinstance(req, str):
                pr.pause_until(now + cfg.max_push_timeout_ms)
                return []
            # a follower that holds the begin entry (same term) keeps its log and needs no data
            seq = pr.control_sent(now)
            return [Send(pr.peer, req, InstallSent(pr, seq, term, req.last_included_index))]
        index = meta.last_included_index
        try:
            next_pos = snapshot_next_pos(store, index)
        except DLedgerError as exc:
            log.warning("%s: cannot read entry %d for %s: %s", me, index, pr.peer, exc)
            next_pos = None
        if next_pos is None:
            pr.pause_until(now + cfg.max_push_timeout_ms)
            return []
        held, offset = self._transfers.get(pr.peer, (-1, 0))
        if held != index:
            offset = 0
            log.warning("%s: %s needs entries this leader's log no longer holds: sending it %s (%d bytes)",
                        me, pr.peer, meta, meta.data_size)
        offset = min(offset, meta.data_size)
        try:
            with self.snapshots.open_reader(meta) as reader:
                reader.seek(offset)
                data = reader.read(min(self.chunk, meta.data_size - offset))
        except OSError as exc:
            log.error("%s: cannot read %s for %s: %s", me, meta, pr.peer, exc)
            pr.pause_until(now + cfg.max_push_timeout_ms)
            return []
        self._transfers[pr.peer] = (index, offset)
        member = self.member_state
        req = InstallSnapshotRequest(group=member.group, local_id=me, remote_id=pr.peer, leader_id=me, term=term,
                                     last_included_index=index, last_included_term=meta.last_included_term,
                                     data=data, next_pos=next_pos, commit_index=member.committed_index,
                                     incarnation=pr.incarnation if pr.recovering else 0,
                                     total_size=meta.data_size, data_crc=meta.data_crc, offset=offset,
                                     chunk_crc=crc32(data))
        seq = pr.control_sent(now)
        return [Send(pr.peer, req, InstallSent(pr, seq, term, index, offset, meta.data_size))]

    def on_answer(self, now: int, sent: InstallSent, resp: InstallSnapshotResponse) -> None:
        """The follower's answer to ``sent``, which the pusher judged current and sound."""
        pr = sent.pr
        if pr.state is not DispatchState.INSTALL_SNAPSHOT:
            return
        me, code, cfg = self.member_state.self_id, resp.code, self.cfg
        if sent.offset >= 0 and resp.received >= 0 and code in (Code.SUCCESS, Code.INSTALL_SNAPSHOT_ERROR):
            self._transfers[pr.peer] = (sent.index, resp.received)
            if code == Code.SUCCESS and resp.received != sent.size:
                return                          # the next chunk goes from ``received``
            if code == Code.INSTALL_SNAPSHOT_ERROR:
                return                          # a chunk refused (its CRC): sent again from ``received``
        if sent.offset >= 0 and code == Code.INCONSISTENT_STATE:
            self.snapshot_wanted = True         # its log begins after this snapshot: a newer one is needed
        if code == Code.SUCCESS:
            self._transfers.pop(pr.peer, None)
            self._refusals.pop(pr.peer, None)
            log.info("%s: %s now begins after %d (its log ends at %d): pushing from %d", me, pr.peer,
                     sent.index, resp.end_index, sent.index + 1)
            pr.installed(sent.index)
            return
        if self._refusals.get(pr.peer) != code:
            self._refusals[pr.peer] = code
            log.warning("%s: %s refused to move its log start to %d: %s", me, pr.peer, sent.index,
                        Code.of(code).name)
        pr.install_refused(self.store.ledger_end_index)
        pr.pause_until(now + max(retry_delay(code, cfg.heart_beat_time_interval_ms),
                                 cfg.max_push_timeout_ms if code == Code.INSTALL_SNAPSHOT_ERROR else 0))


def snapshot_next_pos(store: "LogStore", index: int) -> int | None:
    """This leader's position of entry ``index + 1`` (where a follower installing a snapshot of
    ``index`` places its next entry): that entry's, or past the end of entry ``index`` when it
    is the last; None when this log holds neither."""
    if index < store.ledger_end_index:
        return decode_header(store.get_raw(index + 1)).pos
    if index == store.ledger_end_index and index > store.ledger_before_begin_index:
        h = decode_header(store.get_raw(index))
        return h.pos + h.size
    return None
