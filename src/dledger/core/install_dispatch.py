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

This is where streamed state-machine snapshots belong when they come: choosing between moving
the log start and sending a snapshot, the per-follower transfer (which snapshot, the offset of
the next chunk), a chunk in flight as the one outstanding install, its answer moving the
offset on. The follower's side stays in ``core.log_start`` and ``core.entry_handler``.

State: the member state, the store, the config, and the last refusal logged per follower.
It returns its intents (``Send``, with an ``InstallSent`` context); it never compares a term a
peer sent (the pusher's common answer handling and ``core.term_gate`` do).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

from dledger.core.follower_progress import DispatchState, FollowerProgress, retry_delay
from dledger.core.intents import Send
from dledger.core.log_start import install_request
from dledger.core.member_state import MemberState
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, InstallSnapshotResponse

if TYPE_CHECKING:
    from dledger.store import LogStore

#: the pusher's logger: the install lines keep the name operators know (docs/operations.md)
log = logging.getLogger("dledger.core.entry_pusher")


class InstallSent(NamedTuple):
    """An install of the log start after ``index`` sent to ``pr`` in leadership ``term``; its
    answer counts only while ``seq`` is the progress's ``control_seq``."""

    pr: FollowerProgress
    seq: int
    term: int
    index: int


class InstallDispatch:
    def __init__(self, member_state: MemberState, store: "LogStore", config) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        #: the last refusal code of an install logged per follower (one line per streak)
        self._refusals: dict[str, int] = {}

    def needed(self, pr: FollowerProgress) -> bool:
        """Whether the COMPARE or TRUNCATE due to ``pr`` needs an entry at or below this
        leader's before-begin index, which it no longer holds."""
        begin = self.store.ledger_before_begin_index
        state = pr.state
        return begin >= 0 and (state is DispatchState.COMPARE and pr.next - 1 <= begin
                               or state is DispatchState.TRUNCATE and pr.match < begin)

    def dispatch(self, now: int, pr: FollowerProgress, term: int) -> list[Send]:
        """The install that moves ``pr``'s log start to this leader's (of leadership ``term``),
        or nothing yet (``pr`` paused)."""
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

    def on_answer(self, now: int, sent: InstallSent, resp: InstallSnapshotResponse) -> None:
        """The follower's answer to ``sent``, which the pusher judged current and sound."""
        pr = sent.pr
        if pr.state is not DispatchState.INSTALL_SNAPSHOT:
            return
        me, code, cfg = self.member_state.self_id, resp.code, self.cfg
        if code == Code.SUCCESS:
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
