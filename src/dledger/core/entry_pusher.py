"""EntryPusher: the leader's replication, stepped with ``now_ms``.

One dispatcher per follower, its state a ``FollowerProgress``, walks DLedger's states
(``follower_progress.TRANSITIONS``, keyed by ``DispatchEvent``)::

    COMPARE --COMPARE_MATCHED--> TRUNCATE --TRUNCATED--> APPEND --APPEND_INCONSISTENT--> COMPARE

- COMPARE sends ``(pre_log_index, pre_log_term)`` of ``next - 1``; on a mismatch it
  backs up fast with the follower's ``x_term``/``x_index`` (or its end index), always strictly
  downwards and never below the last entry both logs share (to this leader's last entry of
  ``x_term`` when it holds one, as Raft's fast backup), until an index matches;
- TRUNCATE tells the follower to drop what follows the match (it never drops an entry it has
  already verified against this leader, nor a committed one);
- APPEND keeps up to ``max_push_in_flight`` pushes in flight (pipelining); each carries
  whatever is pending, as the encoded records from ``store.get_raw_range`` (up to
  ``max_batch_append_size`` bytes); an unanswered push is resent from the follower's match
  index after ``max_push_timeout_ms``; a follower lagging more than 1000 entries and more
  bytes than a full push window holds (``max_push_in_flight`` x ``max_batch_append_size``, at
  least Java's ``peerPushThrottlePoint`` of 300 KiB; the bytes are estimated from the records
  of the push at hand) gets at most ``peer_push_quota`` bytes per second: one that keeps up
  under load lags by what the pipeline holds, and is not throttled; when idle, a COMMIT push
  forwards the commit index (``COMMIT_FORWARD_DELAY_MS`` after the last push, so that appends
  made one at a time carry it in their own pushes), and once ``max_push_timeout_ms`` passed
  without a push it is a keepalive.

A follower that needs an entry at or below this leader's before-begin index (retention or a
reset removed it here) is brought forward by the installs instead (INSTALL_SNAPSHOT,
``core.install_dispatch``); then it is truncated after that index and pushed to as usual.
The ranges read for pushes are forgotten whenever the log's begin moves, so none is served
from a segment retention deleted (``core.push_ranges``).

Pending appends (``pending[term]``, a queue in index order) complete with SUCCESS once
committed (and applied), with WAIT_QUORUM_ACK_TIMEOUT after ``max_wait_ack_time_ms``, with EXPIRED_TERM
when the term moves on; more than ``max_pending_requests_num`` of them makes new appends
fail at once with LEADER_PENDING_FULL. The commit index follows the commit rule of
``quorum`` over the water marks (the leader's own log end included), asked of the voters'
``Majority``.

A follower that answers ``recovering`` (protocol-aware recovery, ``core.rejoin``) has its
dispatcher reset (``FollowerProgress.start_recovery``) and its water mark left out of the
commit rule until an answer without the flag. Every push to it from then on names the
incarnation it answered with: such a push left after the water mark was forgotten, so the
commit index it carries covers whatever that water mark helped commit, and the follower ends
its recovery only on one. An answer naming another incarnation resets it again. When such a
follower answers SUCCESS (it follows) and this leader's log holds no entry of its term yet, a
no-op is appended, since the follower clears its flag only after verifying one (a new
cluster's empty log never needs it: its new members clear by themselves).

State: the member state, the store, the config, and two parts built here from those: the
records read for pushes (``PushRanges``) and the installs (``InstallDispatch``). Every
public method returns its intents (``core.intents``): the pushes to send (``Send``, with a
context the node hands back with the answer to ``on_answer``), appends completed or failed
(``Complete``, ``Fail``), and ``StepDown`` when an answer to a push of this leadership says
it is behind (the term gate names the higher term, ``core.term_gate``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from dledger.core.fast_backup import next_after_mismatch
from dledger.core.follower_progress import DispatchState, FollowerProgress, retry_delay
from dledger.core.install_dispatch import InstallDispatch, InstallSent
from dledger.core.intents import Complete, Fail, Send, StepDown
from dledger.core.member_state import MemberState, Role, RoleEvent
from dledger.core.push_ranges import PushRanges
from dledger.entry import BODY_OFFSET, MAGIC_NOOP, MAGIC_NORMAL
from dledger.errors import DLedgerError
from dledger.protocol import (AppendEntryResponse, DLedgerResponseCode as Code, PushEntryRequest,
                              PushEntryResponse, PushEntryType)

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)

LAG_FOR_QUOTA = 1000
#: ... and more bytes than a full push window, at least this many (Java DLedger's
#: ``peerPushThrottlePoint``): small entries in flight through the pipeline lag by thousands
#: without the follower falling behind
LAG_BYTES_FOR_QUOTA = 300 * 1024
#: a follower that is idle (nothing in flight, nothing to send) hears of a commit index its
#: last push did not carry in a COMMIT push once this long passed since that push: appends
#: made one at a time then carry it in their next push instead of a push and an answer more
#: per append (Java DLedger forwards it at most once a second)
COMMIT_FORWARD_DELAY_MS = 5


class _ControlSent(NamedTuple):
    """A COMPARE (at ``compared``) or TRUNCATE (``compared`` -1) sent to ``pr`` in leadership
    ``term``; its answer counts only while ``seq`` is the progress's ``control_seq``."""

    pr: FollowerProgress
    seq: int
    term: int
    compared: int


class _AppendSent(NamedTuple):
    """An APPEND of ``count`` entries from ``first`` sent to ``pr`` in leadership ``term``, in
    the follower's recovery ``epoch``."""

    pr: FollowerProgress
    term: int
    first: int
    count: int
    epoch: int


class _CommitSent(NamedTuple):
    """An idle COMMIT push sent to ``pr`` in leadership ``term`` when its water mark was
    ``match``, in the follower's recovery ``epoch``."""

    pr: FollowerProgress
    term: int
    match: int
    epoch: int


@dataclass(slots=True)
class Pending:
    token: Any
    first_index: int
    last_index: int
    positions: list
    deadline: int


class EntryPusher:
    def __init__(self, member_state: MemberState, store: "LogStore", config, snapshots=None) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        self.term = -1
        self.progress: dict[str, FollowerProgress] = {}
        #: the records read for pushes, shared by the dispatchers (core.push_ranges)
        self.ranges = PushRanges(store, config)
        #: bringing forward a follower behind this leader's begin (core.install_dispatch)
        self.installs = InstallDispatch(member_state, store, config, snapshots)
        self.pending: dict[int, deque[Pending]] = {}
        #: a follower further behind than this (and LAG_FOR_QUOTA entries) is held to the quota
        self._lag_bytes_for_quota = max(LAG_BYTES_FOR_QUOTA,
                                        config.max_push_in_flight * config.max_batch_append_size)

    # =====================================================================================
    # roles
    # =====================================================================================
    def on_role_change(self, now: int, change) -> None:
        self.ranges.forget()
        if change.role is Role.LEADER:
            self.term = change.term
            end = self.store.ledger_end_index
            window = self.cfg.max_push_in_flight
            self.progress = {p: FollowerProgress(p, end + 1, window) for p in self.member_state.remote_peer_ids}
            self.members_changed()
        else:
            self.progress = {}
            self.term = -1

    def members_changed(self) -> None:
        """The configuration changed (``core.membership_sync``): a dispatcher for each member
        added, none for a member removed once its removal committed (until then it still gets
        the entry that removes it, and learns it is out)."""
        member = self.member_state
        if member.role is not Role.LEADER:
            return
        want = set(member.remote_peer_ids)
        history = member.history
        latest = history.latest
        if latest is not None and history.uncommitted(member.committed_index):
            before = history.at(latest.index - 1)
            if before is not None:
                want.update(p for p in before.members if p != member.self_id)
        progress = self.progress
        end = self.store.ledger_end_index
        for peer in want.difference(progress):
            progress[peer] = FollowerProgress(peer, end + 1, self.cfg.max_push_in_flight)
        for peer in set(progress).difference(want):
            del progress[peer]

    def log_cut(self, now: int, index: int) -> list:
        """This leader cut its own log at ``index`` (a damaged entry proven never committed,
        ``core.damaged_tail``): its pending appends from ``index`` on are gone and fail (with
        DISK_ERROR), the ranges read for pushes are forgotten, every follower is compared
        again from the new end, and a no-op of this term follows (a recovering follower clears
        only after verifying one)."""
        member, store = self.member_state, self.store
        out: list = []
        table = self.pending.get(member.curr_term)
        while table and table[-1].last_index >= index:
            out.append(Fail(table.pop().token, Code.DISK_ERROR))
        self.ranges.forget()
        end = store.ledger_end_index
        window = self.cfg.max_push_in_flight
        self.progress = {p: FollowerProgress(p, end + 1, window) for p in member.remote_peer_ids}
        # entries appended from now on are this leadership's (linearizable reads wait for one)
        member.leader_base_index = min(member.leader_base_index, end)
        if store.ledger_end_term != member.curr_term:
            self._propose(now, [(None, [], MAGIC_NOOP)], out)
        return out

    def water_marks(self) -> dict[str, int]:
        """Every member's water mark (``match_index``)."""
        return {peer: self.match_index(peer) for peer in self.member_state.peer_ids}

    def match_index(self, peer: str) -> int:
        if peer == self.member_state.self_id:
            return self.store.ledger_end_index
        pr = self.progress.get(peer)
        return pr.match if pr is not None else -1

    # =====================================================================================
    # proposals
    # =====================================================================================
    def pending_count(self) -> int:
        p = self.pending.get(self.member_state.curr_term)
        return len(p) if p else 0

    def propose(self, now: int, items: list[tuple[Any, list, int]]) -> list[Fail]:
        """Append ``items`` of ``(token, bodies, magic)`` as one store batch per magic run;
        returns the ones that failed at once."""
        out: list = []
        self._propose(now, items, out)
        return out

    def _propose(self, now: int, items: list[tuple[Any, list, int]], out: list) -> None:
        member = self.member_state
        accepted: list[tuple[Any, list, int]] = []
        limit = self.store.max_entry_size - BODY_OFFSET
        room = self.cfg.max_pending_requests_num - self.pending_count()
        for token, bodies, magic in items:
            if member.role is not Role.LEADER:
                out.append(Fail(token, Code.NOT_LEADER))
            elif member.transferee is not None:
                out.append(Fail(token, Code.LEADER_TRANSFERRING))
            elif magic == MAGIC_NORMAL and not bodies:
                out.append(Fail(token, Code.REQUEST_WITH_EMPTY_BODYS))
            elif room <= 0:
                out.append(Fail(token, Code.LEADER_PENDING_FULL))
            elif len(bodies) == 1 and len(bodies[0]) > limit or len(bodies) > 1 and max(map(len, bodies)) > limit:
                out.append(Fail(token, Code.UNEXPECTED_ARGUMENT))
            else:
                room -= 1
                accepted.append((token, bodies, magic))
        i = 0
        while i < len(accepted):
            magic = accepted[i][2]
            j = i
            run: list = []
            while j < len(accepted) and accepted[j][2] == magic:
                run.extend(accepted[j][1] or (b"",))
                j += 1
            try:
                result = self.store.batch_append_as_leader(run, magic)
            except DLedgerError as exc:
                log.warning("%s: append failed: %s", member.self_id, exc)
                for token, _b, _m in accepted[i:j]:
                    out.append(Fail(token, exc.code))
                i = j
                continue
            term = member.curr_term
            table = self.pending.get(term)
            if table is None:
                table = self.pending[term] = deque()
            k = 0
            deadline = now + self.cfg.max_wait_ack_time_ms
            first_index, positions = result.first_index, result.positions
            for token, bodies, _m in accepted[i:j]:
                n = len(bodies) or 1
                first = first_index + k
                table.append(Pending(token, first, first + n - 1, positions[k:k + n], deadline))
                k += n
            i = j

    # =====================================================================================
    # the crank
    # =====================================================================================
    def pump(self, now: int) -> list:
        """Fail the appends of other terms; as leader, advance the commit index and dispatch to
        every follower that is due. Returns the intents."""
        out: list = []
        if len(self.pending) > 1 or (self.pending and self.member_state.curr_term not in self.pending):
            self._expire_other_terms(out)
        if self.member_state.role is not Role.LEADER:
            return out
        self._advance_commit()
        for pr in self.progress.values():
            if now >= pr.retry_at:
                self._dispatch(now, pr, out)
        return out

    def _expire_other_terms(self, out: list) -> None:
        term = self.member_state.curr_term
        for t in [t for t in self.pending if t != term]:
            for p in self.pending.pop(t):
                out.append(Fail(p.token, Code.EXPIRED_TERM))

    def check_timeouts(self, now: int) -> list[Fail]:
        out: list = []
        table = self.pending.get(self.member_state.curr_term)
        while table and table[0].deadline <= now:
            out.append(Fail(table.popleft().token, Code.WAIT_QUORUM_ACK_TIMEOUT))
        return out

    def complete_applied(self, applied_index: int, results: dict) -> list[Complete]:
        """Complete pending appends of the current term up to ``applied_index``."""
        member = self.member_state
        if member.role is not Role.LEADER:
            return []
        term = member.curr_term
        table = self.pending.get(term)
        if not table:
            return []
        out: list = []
        group, self_id = member.group, member.self_id
        while table and table[0].last_index <= applied_index:
            p = table.popleft()
            key = p.last_index
            out.append(Complete(p.token, AppendEntryResponse(
                group=group, local_id=self_id, code=Code.SUCCESS, term=term, leader_id=self_id, index=key,
                pos=p.positions[-1] if p.positions else -1, positions=p.positions),
                results.get(key) if results else None))
        return out

    def _advance_commit(self) -> None:
        member = self.member_state
        end = self.store.ledger_end_index
        if end <= member.committed_index:
            return          # no water mark exceeds the leader's own log end: nothing to commit
        # a recovering follower's water mark counts toward no commit (core.rejoin)
        acked = {p: pr.match for p, pr in self.progress.items() if not pr.recovering}
        acked[member.self_id] = end
        new = member.majority.next_commit_index(acked, member.committed_index, member.curr_term,
                                                self.store.get_entry_term)
        if new > member.committed_index:
            member.leader_update_committed_index(member.curr_term, new)

    def next_deadline(self, now: int) -> int | None:
        out = []
        table = self.pending.get(self.member_state.curr_term)
        if table:
            out.append(table[0].deadline)
        if self.member_state.role is Role.LEADER:
            timeout = self.cfg.max_push_timeout_ms
            end = self.store.ledger_end_index
            for pr in self.progress.values():
                if pr.retry_at > now:
                    out.append(pr.retry_at)
                    continue
                if pr.state is DispatchState.APPEND:
                    if pr.inflights:
                        out.append(pr.inflights.oldest().sent_ms + timeout)
                    elif not pr.commit_outstanding:
                        out.append(pr.last_push_ms + (COMMIT_FORWARD_DELAY_MS
                                                      if pr.commit_sent < self.member_state.committed_index
                                                      else timeout))
                    if pr.next <= end and not pr.inflights.full():
                        out.append(now)
                elif pr.control_sent_ms >= 0:
                    out.append(pr.control_sent_ms + timeout)
                else:
                    out.append(now)
        return min(out) if out else None

    # =====================================================================================
    # one dispatcher
    # =====================================================================================
    def _request(self, pr: FollowerProgress, type_: PushEntryType, **kw) -> PushEntryRequest:
        member = self.member_state
        return PushEntryRequest(group=member.group, local_id=member.self_id, remote_id=pr.peer,
                                leader_id=member.self_id, term=self.term, type=type_,
                                commit_index=member.committed_index,
                                incarnation=pr.incarnation if pr.recovering else 0, **kw)

    def _dispatch(self, now: int, pr: FollowerProgress, out: list) -> None:
        store = self.store
        state = pr.state
        if state is DispatchState.APPEND:
            self._dispatch_append(now, pr, out)
            return
        if pr.control_sent_ms >= 0:
            if now - pr.control_sent_ms < self.cfg.max_push_timeout_ms:
                return
            pr.give_up_control()                # give up on the outstanding one, resend
        if self.installs.needed(pr):
            pr.behind_begin()
            state = pr.state
        if state is DispatchState.INSTALL_SNAPSHOT:
            out.extend(self.installs.dispatch(now, pr, self.term))
            return
        if state is DispatchState.COMPARE:
            compare_index = pr.next - 1
            if compare_index < 0:
                term = -1
            else:
                try:
                    term = store.get_entry_term(compare_index)
                except DLedgerError as exc:
                    log.warning("%s: cannot read entry %d for %s: %s", self.member_state.self_id, compare_index,
                                pr.peer, exc)
                    pr.pause_until(now + self.cfg.max_push_timeout_ms)
                    return
            req = self._request(pr, PushEntryType.COMPARE, pre_log_index=compare_index, pre_log_term=term)
            compared = compare_index
        else:
            cut = pr.match + 1
            try:
                # the term of this leader's entry at the cut (its own term past its log's end):
                # the follower keeps an entry of that term there, which a late copy of this
                # TRUNCATE could otherwise cut (core.entry_handler)
                cut_term = store.get_entry_term(cut) if cut <= store.ledger_end_index else self.term
            except DLedgerError as exc:
                log.warning("%s: cannot read entry %d for %s: %s", self.member_state.self_id, cut, pr.peer, exc)
                pr.pause_until(now + self.cfg.max_push_timeout_ms)
                return
            req = self._request(pr, PushEntryType.TRUNCATE, pre_log_index=cut, pre_log_term=cut_term)
            compared = -1
        seq = pr.control_sent(now)
        out.append(Send(pr.peer, req, _ControlSent(pr, seq, self.term, compared)))

    def _dispatch_append(self, now: int, pr: FollowerProgress, out: list) -> None:
        cfg, store = self.cfg, self.store
        if pr.inflights and now - pr.inflights.oldest().sent_ms >= cfg.max_push_timeout_ms:
            pr.push_timed_out()                 # resend from the match index
        end = store.ledger_end_index
        term = self.term
        while pr.next <= end and not pr.inflights.full():
            if pr.next <= store.ledger_before_begin_index:
                # the next entry to push is gone here (retention, a reset): bring the follower
                # forward (``InstallDispatch.needed`` judges the same for COMPARE and TRUNCATE)
                pr.behind_begin()
                out.extend(self.installs.dispatch(now, pr, term))
                return
            first = pr.next
            try:
                raw, count, last_term, pre_term = self.ranges.read(first)
            except DLedgerError as exc:
                log.warning("%s: cannot read entries from %d for %s: %s", self.member_state.self_id, first,
                            pr.peer, exc)
                pr.pause_until(now + cfg.max_push_timeout_ms)
                return
            behind = end - first
            if behind > LAG_FOR_QUOTA and (behind + 1) * len(raw) > self._lag_bytes_for_quota * count:
                if pr.quota_spent(now, cfg.peer_push_quota):
                    return
                pr.charge_quota(len(raw))
            req = self._request(pr, PushEntryType.APPEND, entries=raw, first_entry_index=first, count=count,
                                last_entry_term=last_term, pre_log_index=first - 1, pre_log_term=pre_term)
            pr.append_sent(first, count, now, self.member_state.committed_index)
            out.append(Send(pr.peer, req, _AppendSent(pr, term, first, count, pr.epoch)))
        committed = self.member_state.committed_index
        if not pr.inflights and pr.next > end and not pr.commit_outstanding \
                and (pr.commit_sent < committed and now - pr.last_push_ms >= COMMIT_FORWARD_DELAY_MS
                     or now - pr.last_push_ms >= cfg.max_push_timeout_ms):
            # forward the commit index; when idle, also a keepalive whose answer carries the
            # follower's end index (a follower that lost its log is found this way)
            pr.commit_push_sent(now, committed)
            # it names this leader's entry at the follower's water mark, so that a follower that
            # restarted since (its process verified nothing yet) verifies its log up to there and
            # can commit (an empty AppendEntries of Raft, with prevLogIndex at the match)
            at, at_term = pr.match, -1
            if at > store.ledger_before_begin_index:
                try:
                    at_term = store.get_entry_term(at)
                except DLedgerError:
                    at = -1
            else:
                at = -1
            out.append(Send(pr.peer, self._request(pr, PushEntryType.COMMIT, pre_log_index=at, pre_log_term=at_term),
                            _CommitSent(pr, term, pr.match, pr.epoch)))

    def _current(self, pr: FollowerProgress, term: int, higher: int | None, out: list) -> bool:
        """Whether an answer to a push of leadership ``term`` to ``pr`` is still this leader's
        to act on; one saying this leader is behind (``higher``, ``core.term_gate``) deposes it."""
        member = self.member_state
        if member.role is not Role.LEADER or member.curr_term != term or self.progress.get(pr.peer) is not pr:
            return False
        if higher is not None:
            out.append(StepDown(higher, RoleEvent.HIGHER_TERM_SEEN))
            return False
        return True

    # -- a recovering follower (core.rejoin) ---------------------------------------------
    def peer_recovering(self, now: int, peer: str, following: bool, incarnation: int = 0) -> list:
        """``peer`` (``incarnation``) answered a heartbeat saying ``recovering`` (``following``:
        with SUCCESS, not while it still relearns its term). Returns the intents."""
        out: list = []
        self._peer_recovering(now, peer, following, incarnation, out)
        return out

    def _peer_recovering(self, now: int, peer: str, following: bool, incarnation: int, out: list) -> bool:
        """``peer`` answered ``recovering`` (a heartbeat or a push). True when this started its
        recovery (again)."""
        pr = self.progress.get(peer)
        if pr is None or self.member_state.role is not Role.LEADER:
            return False
        started = pr.recovery_starts(incarnation)
        if started:
            log.info("%s: %s is recovering: its water mark %d is forgotten; comparing again",
                     self.member_state.self_id, peer, pr.match)
            pr.start_recovery(self.store.ledger_end_index, incarnation)
        if following and self.store.ledger_end_term != self.term:
            # the follower clears its flag only after verifying an entry of this term
            self._propose(now, [(None, [], MAGIC_NOOP)], out)
        return started

    def _sound(self, now: int, pr: FollowerProgress, resp, epoch: int, out: list) -> bool:
        """Whether to act on this answer: a recovering follower starts its recovery here;
        answers to pushes sent before it began are ignored; the first answer without the flag
        ends it (its water mark counts again)."""
        if resp.recovering:
            if self._peer_recovering(now, pr.peer, resp.code == Code.SUCCESS, resp.incarnation, out):
                return False
        if epoch != pr.epoch:
            return False
        if pr.recovering and not resp.recovering:
            pr.recovery_ends()
        return True

    # -- answers ------------------------------------------------------------------------------
    def on_answer(self, now: int, resp: PushEntryResponse | None, ctx: Any, higher: int | None) -> list:
        """The answer to a push (None: unanswered), with the context it was sent with;
        ``higher``: the term above this node's the answer claims (``core.term_gate``)."""
        out: list = []
        kind = type(ctx)
        if kind is _AppendSent:
            self._on_append_response(now, ctx, resp, higher, out)
        elif kind is _ControlSent:
            self._on_control_response(now, ctx, resp, higher, out)
        elif kind is InstallSent:
            if self._control_answer(now, ctx, resp, higher, out):
                self.installs.on_answer(now, ctx, resp)
        else:
            self._on_commit_response(now, ctx, resp, higher, out)
        return out

    def _on_commit_response(self, now: int, sent: _CommitSent, resp, higher: int | None, out: list) -> None:
        pr = sent.pr
        pr.commit_answered()
        if resp is None or not self._current(pr, sent.term, higher, out) \
                or not self._sound(now, pr, resp, sent.epoch, out):
            return
        if resp.code == Code.SUCCESS and resp.end_index < sent.match <= pr.match \
                and pr.state is DispatchState.APPEND:
            # the follower holds less than it acknowledged: its store was lost or replaced
            log.warning("%s: %s now ends at %d below its water mark %d; comparing again",
                        self.member_state.self_id, pr.peer, resp.end_index, pr.match)
            pr.lost_log(resp.end_index, self.store.ledger_end_index)

    def _control_answer(self, now: int, sent, resp, higher: int | None, out: list) -> bool:
        """The common part of a COMPARE, TRUNCATE or install answer: whether the answer is
        still this leadership's and the one the follower's outstanding request waits for (it
        is then marked answered), and sound; a recovering follower's is handed on instead."""
        pr = sent.pr
        if not self._current(pr, sent.term, higher, out):
            return False
        if resp is not None and resp.recovering and pr.recovery_starts(resp.incarnation):
            self._peer_recovering(now, pr.peer, resp.code == Code.SUCCESS, resp.incarnation, out)
            return False
        if sent.seq != pr.control_seq:
            return False
        pr.control_answered()
        return resp is not None and self._sound(now, pr, resp, pr.epoch, out)

    def _on_control_response(self, now: int, sent: _ControlSent, resp, higher: int | None, out: list) -> None:
        if not self._control_answer(now, sent, resp, higher, out):
            return
        pr, end = sent.pr, self.store.ledger_end_index
        compared = sent.compared
        if resp.code == Code.SNAPSHOT_NEEDED and self.installs.snapshots is not None:
            pr.behind_begin()                   # it cannot rebuild its state from its log
            return
        if pr.state is DispatchState.COMPARE:
            if resp.code == Code.SUCCESS:
                pr.on_compare_match(compared)
            elif resp.code == Code.INCONSISTENT_STATE:
                new = next_after_mismatch(self.store, self.member_state.self_id, compared, resp.x_term,
                                          resp.x_index, resp.end_index)
                pr.compare_mismatch(max(0, min(new, pr.next - 1)))     # strictly downwards
            else:
                pr.compare_refused()
                pr.pause_until(now + retry_delay(resp.code, self.cfg.heart_beat_time_interval_ms))
        elif pr.state is DispatchState.TRUNCATE:
            if resp.code == Code.SUCCESS:
                pr.truncated()
            else:
                pr.truncate_refused(end)
                pr.pause_until(now + retry_delay(resp.code, self.cfg.heart_beat_time_interval_ms))

    def _on_append_response(self, now: int, sent: _AppendSent, resp, higher: int | None, out: list) -> None:
        pr = sent.pr
        if resp is None or not self._current(pr, sent.term, higher, out) \
                or not self._sound(now, pr, resp, sent.epoch, out) or pr.state is not DispatchState.APPEND:
            return
        code = resp.code
        if code == Code.SUCCESS:
            pr.on_append_ack(sent.first, sent.count)
        elif code == Code.INCONSISTENT_STATE:
            pr.append_inconsistent(self.store.ledger_end_index)
        elif code == Code.REPEATED_PUSH:
            pass                                  # the first copy will be answered
        elif code == Code.SNAPSHOT_NEEDED and self.installs.snapshots is not None:
            pr.behind_begin()                     # it cannot rebuild its state from its log
        else:
            pr.push_refused()                     # resend from the match index
            pr.pause_until(now + retry_delay(code, self.cfg.heart_beat_time_interval_ms))

    def fail_all(self, code: int) -> list[Fail]:
        out = [Fail(p.token, code) for table in self.pending.values() for p in table]
        self.pending.clear()
        return out
