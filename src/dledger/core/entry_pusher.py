"""EntryPusher (SPEC §5.1-5.3): the leader's replication, stepped with ``now_ms``.

One ``EntryDispatcher`` per follower walks DLedger's states::

    COMPARE --match--> TRUNCATE --ok--> APPEND --INCONSISTENT_STATE--> COMPARE

- COMPARE sends ``(pre_log_index, pre_log_term)`` of ``write_index - 1``; on a mismatch it
  backs up fast with the follower's ``x_term``/``x_index`` (or its end index), always strictly
  downwards, until an index matches;
- TRUNCATE tells the follower to drop what follows the match (it never drops an entry it has
  already verified against this leader, nor a committed one);
- APPEND keeps up to ``max_push_in_flight`` pushes in flight (pipelining); each carries
  whatever is pending, as the encoded records from ``store.get_raw_range`` (up to
  ``max_batch_append_size`` bytes); an unanswered push is resent from the follower's match
  index after ``max_push_timeout_ms``; a follower lagging more than 1000 entries gets at most
  ``peer_push_quota`` bytes per second; when idle, a COMMIT push forwards the commit index.

Pending appends (``pending[term]``, a queue in index order) complete with SUCCESS once committed (and
applied), with WAIT_QUORUM_ACK_TIMEOUT after ``max_wait_ack_time_ms``, with EXPIRED_TERM
when the term moves on; more than ``max_pending_requests_num`` of them makes new appends
fail at once with LEADER_PENDING_FULL. The commit index follows ``quorum.next_commit_index``.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any

from dledger.core.member_state import Role
from dledger.core.quorum import next_commit_index
from dledger.entry import BODY_OFFSET, MAGIC_NORMAL
from dledger.errors import DLedgerError
from dledger.protocol import AppendEntryResponse, DLedgerResponseCode as Code, PushEntryRequest, PushEntryType

log = logging.getLogger(__name__)

LAG_FOR_QUOTA = 1000


class DispatchState(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"
    COMMIT = "COMMIT"


#: The dispatcher's transitions (COMMIT and INSTALL_SNAPSHOT are never entered: commit
#: pushes happen inside APPEND, and snapshots are not implemented).
TRANSITIONS: dict[DispatchState, tuple[DispatchState, ...]] = {
    DispatchState.COMPARE: (DispatchState.COMPARE, DispatchState.TRUNCATE),
    DispatchState.TRUNCATE: (DispatchState.APPEND, DispatchState.COMPARE),
    DispatchState.APPEND: (DispatchState.APPEND, DispatchState.COMPARE),
}


class EntryDispatcher:
    __slots__ = ("peer", "state", "write_index", "match_index", "in_flight", "ctl_sent_ms", "ctl_seq",
                 "retry_at", "commit_sent", "commit_outstanding", "quota_second", "quota_bytes", "seq",
                 "last_push_ms")

    def __init__(self, peer: str, write_index: int) -> None:
        self.peer = peer
        self.state = DispatchState.COMPARE
        self.write_index = write_index
        self.match_index = -1
        self.in_flight: dict[int, tuple[int, int]] = {}   # first index -> (sent_ms, count)
        self.ctl_sent_ms = -1          # a COMPARE/TRUNCATE is outstanding since then
        self.ctl_seq = 0
        self.retry_at = 0
        self.commit_sent = -1
        self.commit_outstanding = False
        self.quota_second = -1
        self.quota_bytes = 0
        self.seq = 0
        self.last_push_ms = 0

    def change_state(self, state: DispatchState, end_index: int) -> None:
        if self.state is DispatchState.APPEND and state is DispatchState.COMPARE:
            self.write_index = end_index + 1
        self.in_flight.clear()
        self.ctl_sent_ms = -1
        self.ctl_seq += 1
        self.state = state


@dataclass(slots=True)
class Pending:
    token: Any
    first_index: int
    last_index: int
    positions: list
    deadline: int


class EntryPusher:
    def __init__(self, node) -> None:
        self.node = node
        self.ms = node.ms
        self.store = node.store
        self.cfg = node.config
        self.term = -1
        self.dispatchers: dict[str, EntryDispatcher] = {}
        # the last ranges read for pushes, shared by the dispatchers: a leader's log only grows
        # while it leads, so a range read for one follower is valid for the others
        self._ranges: dict[int, tuple[bytes, int, int]] = {}
        self.pending: dict[int, deque[Pending]] = {}

    # =====================================================================================
    # roles
    # =====================================================================================
    def on_role_change(self, now: int, change) -> None:
        self._ranges = {}
        if change.role is Role.LEADER:
            self.term = change.term
            end = self.store.ledger_end_index
            self.dispatchers = {p: EntryDispatcher(p, end + 1) for p in self.ms.remote_peer_ids}
        else:
            self.dispatchers = {}
            self.term = -1

    def match_index(self, peer: str) -> int:
        if peer == self.ms.self_id:
            return self.store.ledger_end_index
        d = self.dispatchers.get(peer)
        return d.match_index if d is not None else -1

    # =====================================================================================
    # proposals
    # =====================================================================================
    def pending_count(self) -> int:
        p = self.pending.get(self.ms.curr_term)
        return len(p) if p else 0

    def propose(self, now: int, items: list[tuple[Any, list, int]]) -> None:
        """Append ``items`` of ``(token, bodies, magic)`` as one store batch per magic run."""
        ms, node = self.ms, self.node
        accepted: list[tuple[Any, list, int]] = []
        limit = self.store.max_entry_size - BODY_OFFSET
        room = self.cfg.max_pending_requests_num - self.pending_count()
        for token, bodies, magic in items:
            if ms.role is not Role.LEADER:
                node.fail(token, Code.NOT_LEADER)
            elif ms.transferee is not None:
                node.fail(token, Code.LEADER_TRANSFERRING)
            elif magic == MAGIC_NORMAL and not bodies:
                node.fail(token, Code.REQUEST_WITH_EMPTY_BODYS)
            elif room <= 0:
                node.fail(token, Code.LEADER_PENDING_FULL)
            elif len(bodies) == 1 and len(bodies[0]) > limit or len(bodies) > 1 and max(map(len, bodies)) > limit:
                node.fail(token, Code.UNEXPECTED_ARGUMENT)
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
                log.warning("%s: append failed: %s", ms.self_id, exc)
                for token, _b, _m in accepted[i:j]:
                    node.fail(token, exc.code)
                i = j
                continue
            term = ms.curr_term
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
    def pump(self, now: int) -> None:
        if len(self.pending) > 1 or (self.pending and self.ms.curr_term not in self.pending):
            self._expire_other_terms()
        if self.ms.role is not Role.LEADER:
            return
        self._advance_commit()
        for d in self.dispatchers.values():
            if now >= d.retry_at:
                self._dispatch(now, d)

    def _expire_other_terms(self) -> None:
        term = self.ms.curr_term
        for t in [t for t in self.pending if t != term]:
            for p in self.pending.pop(t):
                self.node.fail(p.token, Code.EXPIRED_TERM)

    def check_timeouts(self, now: int) -> None:
        table = self.pending.get(self.ms.curr_term)
        while table and table[0].deadline <= now:
            self.node.fail(table.popleft().token, Code.WAIT_QUORUM_ACK_TIMEOUT)

    def complete_applied(self, applied_index: int, results: dict) -> None:
        """Complete pending appends of the current term up to ``applied_index``."""
        if self.ms.role is not Role.LEADER:
            return
        term = self.ms.curr_term
        table = self.pending.get(term)
        if not table:
            return
        group, self_id, complete = self.ms.group, self.ms.self_id, self.node.complete
        while table and table[0].last_index <= applied_index:
            p = table.popleft()
            key = p.last_index
            complete(p.token, AppendEntryResponse(
                group=group, local_id=self_id, code=Code.SUCCESS, term=term, leader_id=self_id, index=key,
                pos=p.positions[-1] if p.positions else -1, positions=p.positions),
                results.get(key) if results else None)

    def _advance_commit(self) -> None:
        ms = self.ms
        marks = [self.store.ledger_end_index]
        marks.extend(d.match_index for d in self.dispatchers.values())
        new = next_commit_index(marks, ms.committed_index, ms.curr_term, self.store.get_entry_term)
        if new > ms.committed_index:
            ms.leader_update_committed_index(ms.curr_term, new)

    def next_deadline(self, now: int) -> int | None:
        out = []
        table = self.pending.get(self.ms.curr_term)
        if table:
            out.append(table[0].deadline)
        if self.ms.role is Role.LEADER:
            timeout = self.cfg.max_push_timeout_ms
            end = self.store.ledger_end_index
            for d in self.dispatchers.values():
                if d.retry_at > now:
                    out.append(d.retry_at)
                    continue
                if d.state is DispatchState.APPEND:
                    if d.in_flight:
                        out.append(next(iter(d.in_flight.values()))[0] + timeout)
                    elif not d.commit_outstanding:
                        out.append(d.last_push_ms + timeout)
                    if d.write_index <= end and len(d.in_flight) < self.cfg.max_push_in_flight:
                        out.append(now)
                elif d.ctl_sent_ms >= 0:
                    out.append(d.ctl_sent_ms + timeout)
                else:
                    out.append(now)
        return min(out) if out else None

    # =====================================================================================
    # one dispatcher
    # =====================================================================================
    def _request(self, d: EntryDispatcher, type_: PushEntryType, **kw) -> PushEntryRequest:
        ms = self.ms
        return PushEntryRequest(group=ms.group, local_id=ms.self_id, remote_id=d.peer, leader_id=ms.self_id,
                                term=self.term, type=type_, commit_index=ms.committed_index, **kw)

    def _dispatch(self, now: int, d: EntryDispatcher) -> None:
        store = self.store
        state = d.state
        if state is DispatchState.APPEND:
            self._dispatch_append(now, d)
            return
        if d.ctl_sent_ms >= 0:
            if now - d.ctl_sent_ms < self.cfg.max_push_timeout_ms:
                return
            d.ctl_seq += 1                      # give up on the outstanding one, resend
        seq = d.ctl_seq
        if state is DispatchState.COMPARE:
            compare_index = d.write_index - 1
            if compare_index < store.ledger_before_begin_index:
                # The follower needs entries this leader no longer has (snapshots are not
                # implemented): compare at the first entry we hold and let the follower refuse.
                compare_index = store.ledger_before_begin_index
                d.write_index = compare_index + 1
            if compare_index < 0:
                term = -1
            else:
                try:
                    term = store.get_entry_term(compare_index)
                except DLedgerError as exc:
                    log.warning("%s: cannot read entry %d for %s: %s", self.ms.self_id, compare_index, d.peer, exc)
                    d.retry_at = now + self.cfg.max_push_timeout_ms
                    return
            req = self._request(d, PushEntryType.COMPARE, pre_log_index=compare_index, pre_log_term=term)
            ctx = (compare_index, term)
        else:
            req = self._request(d, PushEntryType.TRUNCATE, pre_log_index=d.match_index + 1)
            ctx = None
        d.ctl_sent_ms = now
        term = self.term
        self.node.send(d.peer, req, lambda now_, src, resp: self._on_ctl_response(now_, d, seq, term, ctx, resp))

    def _dispatch_append(self, now: int, d: EntryDispatcher) -> None:
        cfg, store = self.cfg, self.store
        if d.in_flight:
            sent, _count = next(iter(d.in_flight.values()))
            if now - sent >= cfg.max_push_timeout_ms:
                d.in_flight.clear()
                d.write_index = d.match_index + 1
        end = store.ledger_end_index
        term = self.term
        while d.write_index <= end and len(d.in_flight) < cfg.max_push_in_flight:
            lagging = end - d.write_index > LAG_FOR_QUOTA
            if lagging:
                second = now // 1000
                if d.quota_second != second:
                    d.quota_second, d.quota_bytes = second, 0
                if d.quota_bytes >= cfg.peer_push_quota:
                    d.retry_at = (second + 1) * 1000
                    return
            first = d.write_index
            try:
                cached = self._ranges.get(first)
                if cached is None:
                    raw, count = store.get_raw_range(first, cfg.max_batch_append_size, cfg.max_batch_append_count)
                    last_term = store.get_entry_term(first + count - 1)
                    if len(self._ranges) >= 256:
                        del self._ranges[next(iter(self._ranges))]
                    self._ranges[first] = (raw, count, last_term)
                else:
                    raw, count, last_term = cached
            except DLedgerError as exc:
                log.warning("%s: cannot read entries from %d for %s: %s", self.ms.self_id, first, d.peer, exc)
                d.retry_at = now + cfg.max_push_timeout_ms
                return
            if lagging:
                d.quota_bytes += len(raw)
            req = self._request(d, PushEntryType.APPEND, entries=raw, first_entry_index=first, count=count,
                                last_entry_term=last_term, pre_log_index=first - 1)
            d.in_flight[first] = (now, count)
            d.last_push_ms = now
            d.write_index = first + count
            d.commit_sent = self.ms.committed_index
            self.node.send(d.peer, req, lambda now_, src, resp, f=first, c=count:
                           self._on_append_response(now_, d, term, f, c, resp))
        if not d.in_flight and d.write_index > end and not d.commit_outstanding \
                and (d.commit_sent < self.ms.committed_index or now - d.last_push_ms >= cfg.max_push_timeout_ms):
            # forward the commit index; when idle, also a keepalive whose answer carries the
            # follower's end index (a follower that lost its log is found this way)
            d.commit_outstanding = True
            d.commit_sent = self.ms.committed_index
            d.last_push_ms = now
            self.node.send(d.peer, self._request(d, PushEntryType.COMMIT),
                           lambda now_, src, resp, m=d.match_index: self._on_commit_response(d, term, m, resp))

    def _current(self, d: EntryDispatcher, term: int, resp) -> bool:
        ms = self.ms
        if ms.role is not Role.LEADER or ms.curr_term != term or self.dispatchers.get(d.peer) is not d:
            return False
        if resp is not None and resp.code == Code.EXPIRED_TERM and resp.term > ms.curr_term:
            self.node.elector.become_candidate(self.node.now_ms, resp.term)
            return False
        return True

    def _retry_delay(self, code: int) -> int:
        """NOT_FOLLOWER right after an election means the push overtook the first heartbeat:
        retry soon. Anything else: after a heartbeat interval."""
        interval = self.cfg.heart_beat_time_interval_ms
        return max(1, interval // 10) if code == Code.NOT_FOLLOWER else interval

    def _on_commit_response(self, d: EntryDispatcher, term: int, match_at_send: int, resp) -> None:
        d.commit_outstanding = False
        if resp is None or not self._current(d, term, resp):
            return
        if resp.code == Code.SUCCESS and resp.end_index < match_at_send <= d.match_index \
                and d.state is DispatchState.APPEND:
            # the follower holds less than it acknowledged: its store was lost or replaced
            log.warning("%s: %s now ends at %d below its water mark %d; comparing again",
                        self.ms.self_id, d.peer, resp.end_index, d.match_index)
            d.match_index = resp.end_index
            d.change_state(DispatchState.COMPARE, self.store.ledger_end_index)

    def _on_ctl_response(self, now: int, d: EntryDispatcher, seq: int, term: int, ctx, resp) -> None:
        if not self._current(d, term, resp) or seq != d.ctl_seq:
            return
        d.ctl_sent_ms = -1
        end = self.store.ledger_end_index
        if resp is None:
            return
        if d.state is DispatchState.COMPARE:
            if resp.code == Code.SUCCESS:
                d.match_index = max(d.match_index, ctx[0])
                d.change_state(DispatchState.TRUNCATE, end)
            elif resp.code == Code.INCONSISTENT_STATE:
                new = resp.x_index if resp.x_term != -1 else resp.end_index + 1
                d.write_index = max(0, min(new, d.write_index - 1))
                d.ctl_seq += 1
            else:
                d.ctl_seq += 1
                d.retry_at = now + self._retry_delay(resp.code)
        elif d.state is DispatchState.TRUNCATE:
            if resp.code == Code.SUCCESS:
                d.change_state(DispatchState.APPEND, end)
                d.write_index = d.match_index + 1
            else:
                d.change_state(DispatchState.COMPARE, end)
                d.write_index = end + 1
                d.retry_at = now + self._retry_delay(resp.code)

    def _on_append_response(self, now: int, d: EntryDispatcher, term: int, first: int, count: int, resp) -> None:
        if resp is None or not self._current(d, term, resp) or d.state is not DispatchState.APPEND:
            return
        code = resp.code
        if code == Code.SUCCESS:
            if d.in_flight.get(first, (0, -1))[1] == count:
                del d.in_flight[first]
            last = first + count - 1
            if last > d.match_index:
                d.match_index = last
        elif code == Code.INCONSISTENT_STATE:
            d.change_state(DispatchState.COMPARE, self.store.ledger_end_index)
        elif code == Code.REPEATED_PUSH:
            pass                                  # the first copy will be answered
        else:
            d.in_flight.clear()
            d.write_index = d.match_index + 1
            d.retry_at = now + self._retry_delay(code)

    def fail_all(self, code: int) -> None:
        for table in self.pending.values():
            for p in table:
                self.node.fail(p.token, code)
        self.pending.clear()
