"""EntryHandler: the follower's side of replication.

Rules:
- pushes are accepted only from the leader this node follows, in its term (a follower
  learns its leader from heartbeats, as in DLedger); the term gate (``core.term_gate``)
  answers another term EXPIRED_TERM or NOT_FOLLOWER, the node's step function a leader or
  candidate NOT_FOLLOWER, and the handler a push of another leader INCONSISTENT_LEADER:
  none of them changes anything;
- an APPEND whose first index is beyond ``ledger_end + 1`` waits for its predecessor (a
  duplicate waiting copy is answered REPEATED_PUSH); waiting pushes older than
  ``max_push_timeout_ms`` are answered INCONSISTENT_STATE so the leader compares again;
- an APPEND is accepted only when the entry before its first index is in the local log with
  the term the leader names in ``pre_log_term`` (Raft's log matching); one that overlaps
  the local log is checked byte for byte: matching records are
  acknowledged again (duplicates and resends are idempotent), the first differing record
  and everything after it is truncated and replaced (Raft's rule); records are written as
  the leader's bytes at the leader's positions (the store refuses anything else);
- COMPARE and TRUNCATE answer every waiting APPEND they supersede (DLedger drops them
  unanswered, so its leader waits for a timeout);
  TRUNCATE never removes an entry already verified against this leader in this term (so a
  late duplicate cannot undo acknowledged appends) nor a committed one (one that would is
  refused: a fresh one never cuts below them); it is accepted only
  right after a COMPARE matched the index before it in this term (at -1 every log matches, so
  a TRUNCATE at 0 always passes that check), and answers SUCCESS only when the store's log
  really ends before the cut afterwards. It names in
  ``pre_log_term`` the term of the leader's entry at the cut (its own term when its log ended
  before the cut): an entry there of that term is the leader's own, so nothing conflicts and
  nothing is cut (a TRUNCATE replayed after a restart once dropped a whole log: seed 400123);
- a COMMIT push names in ``pre_log_index``/``pre_log_term`` the leader's entry at this
  follower's water mark: holding it with that term, the follower's log agrees with the
  leader's up to there (log matching) and counts as verified, so a follower whose process
  restarted commits without waiting for a new append;
- the commit index learnt from a push or heartbeat is capped by ``matched_index``, the
  highest index verified against the current leader in its term: a follower never commits
  an entry it has not checked against the leader;
- a push whose bytes do not hold the records it names raises ``PeerProtocolError`` (the node
  answers it UNEXPECTED_ARGUMENT; a parked one is answered so here, not its drainer);
- an admitted push (``admit``: from the leader this node follows, and this node may answer a
  leader) proves the leader alive, as a heartbeat does (the node's step function tells the
  heartbeats, ``HeardLeader``);
- an install (``InstallSnapshotRequest``, admitted as a push) moves this log's start to the
  leader's when the leader no longer holds what this follower needs (``core.log_start``); a
  node with a state machine refuses one without a snapshot (INSTALL_SNAPSHOT_ERROR: it cannot
  skip entries) unless it holds the begin entry the install names (then it drops nothing), and
  takes the leader's snapshot in chunks instead (``core.snapshot_receiver``);
- a node whose state machine cannot be rebuilt from its log (``StateMachineCaller.needs_snapshot``)
  answers every APPEND, COMPARE and TRUNCATE SNAPSHOT_NEEDED, so the leader sends its snapshot;
- a recovering follower (``core.rejoin``) marks every answer ``recovering`` (with its
  ``incarnation``); before each SUCCESS it asks recovery whether it has now caught up
  (``on_push_success``, told the incarnation the push names; it may clear the flag durably
  first).

State: the member state, the store, the config and recovery (``core.rejoin``: whether this
node may answer a leader, ``on_push_success`` before each SUCCESS while recovering, and the
incarnation to send). Answers given later than their push (parked pushes drained, flushed or
timed out) are returned as ``Reply`` intents (``core.intents``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from dledger.core import log_start
from dledger.core.intents import NONE, Reply
from dledger.core.member_state import MemberState, Role
from dledger.entry import MAGIC_SIZE
from dledger.errors import DLedgerError, PeerProtocolError
from dledger.protocol import (DLedgerResponseCode as Code, InstallSnapshotRequest, InstallSnapshotResponse,
                              PushEntryRequest, PushEntryResponse, PushEntryType)

if TYPE_CHECKING:
    from dledger.core.rejoin import Rejoin
    from dledger.core.snapshot_receiver import SnapshotReceiver
    from dledger.core.state_machine_caller import StateMachineCaller
    from dledger.store import LogStore

log = logging.getLogger(__name__)

MAX_WAITING = 1024


class WaitingPush(NamedTuple):
    """An APPEND parked until its predecessor arrives: who sent it, and since when."""

    src: str
    request_id: int
    req: PushEntryRequest
    since_ms: int


class EntryHandler:
    def __init__(self, member_state: MemberState, store: "LogStore", config, *, recovery: "Rejoin",
                 caller: "StateMachineCaller", receiver: "SnapshotReceiver | None" = None) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        self.recovery = recovery
        #: a state machine is registered: the log start cannot move without a snapshot
        self.state_machine = caller.state_machine is not None
        #: applying (``needs_snapshot``: SNAPSHOT_NEEDED to pushes), and the snapshot installs
        self.caller = caller
        self.receiver = receiver
        #: parked APPENDs by first index
        self.waiting: dict[int, WaitingPush] = {}
        self.matched_term = -1
        self.matched_index = -1

    # -- helpers --------------------------------------------------------------------------
    def _answer(self, req: PushEntryRequest, code: int, **kw) -> PushEntryResponse:
        member = self.member_state
        if type(req) is InstallSnapshotRequest:
            return self._install_answer(req, code)
        if req.type != PushEntryType.COMMIT and "index" not in kw:
            kw["index"] = req.first_entry_index
            kw["count"] = req.count
        store = self.store
        if code == Code.SUCCESS and store.suspect is not None:
            # recovering: caught up far enough? (clears the flag durably before this answer)
            self.recovery.on_push_success(req.term, req.commit_index, self.matched_term, self.matched_index,
                                          req.incarnation)
        recovering = store.suspect is not None
        return PushEntryResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                 leader_id=member.leader_id, code=code,
                                 term=member.curr_term if code == Code.EXPIRED_TERM else req.term,
                                 type=req.type, end_index=store.ledger_end_index, recovering=recovering,
                                 incarnation=self.recovery.incarnation if recovering else 0, **kw)

    def _install_answer(self, req: InstallSnapshotRequest, code: int, received: int = -1) -> InstallSnapshotResponse:
        member, store = self.member_state, self.store
        if code == Code.SUCCESS and store.suspect is not None:
            self.recovery.on_push_success(req.term, req.commit_index, self.matched_term, self.matched_index,
                                          req.incarnation)
        recovering = store.suspect is not None
        return InstallSnapshotResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                       leader_id=member.leader_id, code=code,
                                       term=member.curr_term if code == Code.EXPIRED_TERM else req.term,
                                       end_index=store.ledger_end_index, recovering=recovering,
                                       incarnation=self.recovery.incarnation if recovering else 0,
                                       received=received)

    def _verified(self, term: int, index: int) -> None:
        if self.matched_term != term:
            self.matched_term, self.matched_index = term, -1
        if index > self.matched_index:
            self.matched_index = index

    def commit_hint(self, term: int, commit_index: int) -> None:
        """The leader of ``term`` says ``commit_index`` is committed."""
        if self.matched_term == term and commit_index >= 0:
            self.member_state.follower_update_committed_index(min(commit_index, self.matched_index))

    def flush_waiting(self, code: int) -> list[Reply]:
        """Answer every parked push with ``code``."""
        waiting, self.waiting = self.waiting, {}
        return [Reply(w.src, w.request_id, self._answer(w.req, code)) for w in waiting.values()]

    def on_role_change(self, change) -> list[Reply] | tuple:
        replies = self.flush_waiting(Code.NOT_FOLLOWER) if change.role is not Role.FOLLOWER else NONE
        if self.matched_term != change.term:
            self.matched_term, self.matched_index = -1, -1
        return replies

    # -- entry point ----------------------------------------------------------------------
    def answer(self, req: PushEntryRequest, code: int) -> PushEntryResponse:
        """The answer to ``req`` (a push or an install) with ``code`` (EXPIRED_TERM carries this
        node's term)."""
        return self._answer(req, code)

    def admit(self, req: PushEntryRequest) -> PushEntryResponse | None:
        """A push of this node's term, to a follower (the term gate and the role's step
        function judged those, ``core.step``): the answer when it is not from the leader this
        node follows or this node may not answer a leader yet, else None."""
        if req.leader_id != self.member_state.leader_id:
            return self._answer(req, Code.INCONSISTENT_LEADER)
        if not self.recovery.may_follow():
            return self._answer(req, Code.TERM_NOT_READY)     # relearning its term (core.rejoin)
        return None

    def handle_push(self, now: int, src: str, rid: int, req: PushEntryRequest) \
            -> tuple[PushEntryResponse | None, list[Reply] | tuple]:
        """An admitted push: its answer (None: parked, answered later) and the answers to parked
        pushes it drained or superseded, which go first."""
        self._verified(req.term, -1)            # (verified in this leader's term: nothing yet)
        t = req.type
        if self.caller.needs_snapshot and t != PushEntryType.COMMIT:
            return self._answer(req, Code.SNAPSHOT_NEEDED), NONE
        if t == PushEntryType.APPEND:
            if req.count <= 0 or not req.entries:
                return self._answer(req, Code.UNEXPECTED_ARGUMENT), NONE
            first = req.first_entry_index
            if first > self.store.ledger_end_index + 1:
                if first in self.waiting:
                    return self._answer(req, Code.REPEATED_PUSH), NONE
                if len(self.waiting) >= MAX_WAITING:
                    return self._answer(req, Code.PUSH_REQUEST_IS_FULL), NONE
                if type(req.entries) is not bytes:   # a view of a transport's buffer: not kept
                    req.entries = bytes(req.entries)
                self.waiting[first] = WaitingPush(src, rid, req, now)
                return None, NONE
            resp = self._append(req)
            return resp, self._drain()
        if t == PushEntryType.COMMIT:
            p = req.pre_log_index
            if p >= 0 and req.pre_log_term >= 0 and p <= self.store.ledger_end_index:
                try:
                    if self.store.get_entry_term(p) == req.pre_log_term:
                        self._verified(req.term, p)         # log matching: the logs agree up to p
                except DLedgerError:
                    pass
            self.commit_hint(req.term, req.commit_index)
            return self._answer(req, Code.SUCCESS), NONE
        if t in (PushEntryType.COMPARE, PushEntryType.TRUNCATE):
            replies = self.flush_waiting(Code.INCONSISTENT_STATE) if self.waiting else NONE
            return self._compare(req) if t == PushEntryType.COMPARE else self._truncate(req), replies
        return self._answer(req, Code.UNEXPECTED_ARGUMENT), NONE

    def tick(self, now: int) -> list[Reply] | tuple:
        """Drain what can be, and answer the parked pushes that waited too long."""
        if not self.waiting:
            return NONE
        replies = self._drain()
        limit = now - self.cfg.max_push_timeout_ms
        for first in [k for k, w in self.waiting.items() if w.since_ms <= limit]:
            w = self.waiting.pop(first)
            replies.append(Reply(w.src, w.request_id, self._answer(w.req, Code.INCONSISTENT_STATE)))
        return replies

    def next_deadline(self) -> int | None:
        if not self.waiting:
            return None
        return min(w.since_ms for w in self.waiting.values()) + self.cfg.max_push_timeout_ms

    def _drain(self) -> list[Reply]:
        """Append the parked pushes whose predecessor has arrived; returns their answers."""
        replies: list[Reply] = []
        while self.waiting:
            end = self.store.ledger_end_index
            ready = [k for k in self.waiting if k <= end + 1]
            if not ready:
                break
            for k in sorted(ready):
                w = self.waiting.pop(k)
                try:
                    resp = self._append(w.req)
                except PeerProtocolError as exc:     # that parked push's fault, not the caller's
                    log.warning("%s: refused %s", self.member_state.self_id, exc)
                    resp = self._answer(w.req, Code.UNEXPECTED_ARGUMENT)
                replies.append(Reply(w.src, w.request_id, resp))
        return replies

    # -- the log start (core.log_start) ----------------------------------------------------------
    def handle_install(self, req: InstallSnapshotRequest) -> tuple[InstallSnapshotResponse, list[Reply] | tuple]:
        """An admitted install from the leader: move this log's start to the leader's
        (``core.log_start``). Its answer, and the answers to the parked pushes it superseded."""
        log_start.check_install(req)
        replies = self.flush_waiting(Code.INCONSISTENT_STATE) if self.waiting else NONE
        self._verified(req.term, -1)
        me = self.member_state.self_id
        index, term = req.last_included_index, req.last_included_term
        if req.total_size >= 0:
            if self.receiver is None:
                log.error("%s: leader %s sends a snapshot, but this node takes none: refused", me, req.leader_id)
                return self._install_answer(req, Code.INSTALL_SNAPSHOT_ERROR), replies
            code, received = self.receiver.receive(req, max(self.matched_index, self.member_state.committed_index))
            if code == Code.SUCCESS and received == req.total_size:
                self._verified(req.term, index)
                self.commit_hint(req.term, req.commit_index)
            return self._install_answer(req, code, received), replies
        if req.data:
            return self._install_answer(req, Code.UNSUPPORTED), replies
        if self.state_machine and not self._holds(index, term):
            log.error("%s: leader %s asks to move this log's start past entries this node needs (its log "
                      "begins after %d, this one ends at %d): a node with a state machine cannot skip them "
                      "without a snapshot (the leader takes none: has it a state machine that saves "
                      "snapshots?): refused", me, req.leader_id, index, self.store.ledger_end_index)
            return self._install_answer(req, Code.INSTALL_SNAPSHOT_ERROR), replies
        store = self.store
        before = (store.ledger_before_begin_index, store.ledger_end_index)
        try:
            moved = log_start.move_log_start(store, index, term, req.next_pos,
                                             max(self.matched_index, self.member_state.committed_index))
        except DLedgerError as exc:
            log.warning("%s: refused to move its log start to %d (term %d) for leader %s: %s", me, index, term,
                        req.leader_id, exc)
            return self._install_answer(req, exc.code), replies
        if moved:
            log.warning("%s: log start moved to the leader's: it held entries %d..%d, now begins after %d "
                        "(term %d), its next entry at position %d (leader %s)", me, before[0] + 1, before[1],
                        index, term, req.next_pos, req.leader_id)
        self._verified(req.term, index)
        self.commit_hint(req.term, req.commit_index)
        return self._install_answer(req, Code.SUCCESS), replies

    def _holds(self, index: int, term: int) -> bool:
        """Does this log hold entry ``index`` of ``term`` (so moving its start to there drops
        nothing)?"""
        store = self.store
        if not store.ledger_before_begin_index <= index <= store.ledger_end_index:
            return False
        try:
            return store.get_entry_term(index) == term
        except DLedgerError:
            return False

    # -- APPEND ---------------------------------------------------------------------------
    def _append(self, req: PushEntryRequest) -> PushEntryResponse:
        store = self.store
        first, last = req.first_entry_index, req.last_entry_index
        data = memoryview(req.entries)
        try:
            offset = 0
            index = first
            end = store.ledger_end_index
            if first <= store.ledger_before_begin_index:
                return self._answer(req, Code.INCONSISTENT_STATE)
            # log matching: the entry before the first one must be here, of the leader's term
            prev = first - 1
            if prev >= 0 and store.get_entry_term(prev) != req.pre_log_term:
                log.warning("%s: push %d..%d from %s refused: entry %d is of term %d here, %d at the leader",
                            self.member_state.self_id, first, last, req.leader_id, prev,
                            store.get_entry_term(prev), req.pre_log_term)
                return self._answer(req, Code.INCONSISTENT_STATE)
            # skip what we already hold, byte for byte; truncate at the first difference
            while index <= end and offset < len(data):
                if offset + MAGIC_SIZE.size > len(data):
                    raise PeerProtocolError(f"push {first}..{last} from {req.leader_id}: the record at batch "
                                            f"offset {offset} is cut short ({len(data) - offset} bytes)")
                size = MAGIC_SIZE.unpack_from(data, offset)[1]
                if size <= 0 or offset + size > len(data):
                    return self._answer(req, Code.INCONSISTENT_STATE)
                if store.get_raw(index) != data[offset:offset + size]:
                    if index <= max(self.matched_index, self.member_state.committed_index):
                        log.error("%s: leader %s sent entry %d that differs from a verified one",
                                  self.member_state.self_id, req.leader_id, index)
                        return self._answer(req, Code.INCONSISTENT_STATE)
                    store.truncate(index)
                    break
                offset += size
                index += 1
            if offset < len(data):
                store.batch_append_as_follower(data[offset:], req.term, req.leader_id)
        except DLedgerError as exc:
            log.warning("%s: push %d..%d from %s refused: %s", self.member_state.self_id, first, last,
                        req.leader_id, exc)
            return self._answer(req, Code.INCONSISTENT_STATE)
        if store.ledger_end_index < last:
            return self._answer(req, Code.INCONSISTENT_STATE)
        self._verified(req.term, last)
        self.commit_hint(req.term, req.commit_index)
        return self._answer(req, Code.SUCCESS)

    # -- COMPARE / TRUNCATE ---------------------------------------------------------------
    def _compare(self, req: PushEntryRequest) -> PushEntryResponse:
        store = self.store
        p = req.pre_log_index
        if p == -1 and req.pre_log_term == -1:
            self._verified(req.term, -1)
            return self._answer(req, Code.SUCCESS, index=p)
        end = store.ledger_end_index
        try:
            if end >= p >= store.ledger_before_begin_index:
                local = store.get_entry_term(p)
                if local == req.pre_log_term:
                    self._verified(req.term, p)
                    return self._answer(req, Code.SUCCESS, index=p)
                first = store.get_first_log_of_target_term(local, p) if p > store.ledger_before_begin_index else None
                if first is None:
                    return self._answer(req, Code.INCONSISTENT_STATE, index=p)
                return self._answer(req, Code.INCONSISTENT_STATE, index=p, x_term=local, x_index=first.index)
        except DLedgerError as exc:
            log.warning("%s: compare at %d failed: %s", self.member_state.self_id, p, exc)
        return self._answer(req, Code.INCONSISTENT_STATE, index=p)

    def _truncate(self, req: PushEntryRequest) -> PushEntryResponse:
        store = self.store
        p = req.pre_log_index
        if p < 0 or p - 1 > self.matched_index or p > store.ledger_end_index + 1:
            # the leader cuts after the index its COMPARE matched in this term; a TRUNCATE
            # without that match here (or past the log's end) would verify unchecked entries
            return self._answer(req, Code.INCONSISTENT_STATE, index=p)
        if max(self.matched_index, self.member_state.committed_index) >= p:
            # below what this follower verified in this term or committed: a fresh TRUNCATE
            # follows a COMPARE at or above both (the leader compares down from its end, never
            # below an entry both logs share), so this is a late copy: it cuts nothing
            return self._answer(req, Code.INCONSISTENT_STATE, index=p)
        at = p
        try:
            if req.pre_log_term >= 0 and at <= store.ledger_end_index \
                    and store.get_entry_term(at) == req.pre_log_term:
                # the entry at the cut has the term the leader's log has there (its own term
                # where its log ended when it sent this): it is the leader's entry, not a
                # conflicting one, and a late copy of an earlier TRUNCATE must not cut it
                at = store.ledger_end_index + 1
            if at <= store.ledger_end_index:
                store.truncate(at)
        except DLedgerError as exc:
            log.warning("%s: truncate at %d failed: %s", self.member_state.self_id, at, exc)
            return self._answer(req, Code.INCONSISTENT_STATE, index=p)
        if store.ledger_end_index >= at:
            log.error("%s: truncate at %d left the log ending at %d", self.member_state.self_id, at,
                      store.ledger_end_index)
            return self._answer(req, Code.INCONSISTENT_STATE, index=p)
        self._verified(req.term, min(store.ledger_end_index, max(req.pre_log_index - 1, self.matched_index)))
        self.commit_hint(req.term, req.commit_index)
        return self._answer(req, Code.SUCCESS, index=req.pre_log_index)
