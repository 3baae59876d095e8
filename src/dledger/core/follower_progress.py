"""FollowerProgress: what the leader knows about one follower's log, and the dispatcher
state that drives replication to it (DLedger's ``EntryDispatcher`` state, shaped like etcd's
``tracker.Progress``).

States and their transitions are ``TRANSITIONS``, and every state change goes through it
(``IllegalTransition`` otherwise). Every field changes only through a named method of the
progress (as etcd's ``tracker.Progress``): the pusher reads the fields and calls the methods,
never assigns one::

    COMPARE --match--> TRUNCATE --ok--> APPEND --INCONSISTENT_STATE--> COMPARE

Fields and the rules they keep:
- ``match``: the follower's water mark, the highest index it acknowledged *in this
  leadership* (``-1``: none yet). It only grows (``on_compare_match``, ``on_append_ack``),
  except when the follower shows it lost entries it had acknowledged (``lost_log``);
- ``next``: the next index to send (DLedger's ``writeIndex``). COMPARE backs it up strictly
  downwards; entering APPEND sets it to ``match + 1``; entering COMPARE from TRUNCATE or
  APPEND sets it to the leader's end index + 1. Unlike etcd, ``match < next`` is not an
  invariant: an acknowledgement that arrives after a resend reset may leave ``match >= next``
  until the next push, which is then a harmless resend (the follower answers it again);
- ``inflights``: the APPEND pushes sent and not yet answered (``Inflights``); empty outside
  APPEND, since every state change clears it;
- ``control_sent_ms`` / ``control_seq``: the outstanding COMPARE or TRUNCATE request (``-1``:
  none; outside COMPARE and TRUNCATE always ``-1``); an answer counts only if it carries the
  current ``control_seq``, which every state change and every give-up moves on;
- ``retry_at``: nothing is sent to this follower before then (``pause_until``);
- ``commit_sent`` / ``commit_outstanding``: the commit index last forwarded, and whether an
  idle COMMIT push is unanswered;
- ``quota_second`` / ``quota_bytes``: bytes pushed in the current second to a lagging follower;
- ``last_push_ms``: when the last APPEND or COMMIT push left;
- ``recovering``: the follower said it is recovering (protocol-aware recovery,
  ``core.recovery``): its water mark counts toward no commit until an answer without the flag;
  ``epoch`` moves on when that starts, and answers to pushes sent before are ignored (they may
  come from its earlier incarnation); ``incarnation`` is the one it named then, which every
  push to it echoes while it recovers (only such a push can end its recovery). An answer
  naming another incarnation (the follower restarted again) starts it anew.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from dledger.core.transitions import TransitionTable


class DispatchState(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"
    COMMIT = "COMMIT"


#: The dispatcher's transitions, enforced by ``FollowerProgress`` (COMMIT and
#: INSTALL_SNAPSHOT are DLedger's values but never entered: commit pushes happen inside
#: APPEND, and snapshots are not implemented). docs/architecture.md draws this table.
TRANSITIONS: TransitionTable[DispatchState] = TransitionTable("dispatcher", (
    (DispatchState.COMPARE, DispatchState.COMPARE, "mismatch (compare again lower) or retry"),
    (DispatchState.COMPARE, DispatchState.TRUNCATE, "the follower holds the compared entry"),
    (DispatchState.TRUNCATE, DispatchState.APPEND, "the follower dropped its unverified tail"),
    (DispatchState.TRUNCATE, DispatchState.COMPARE, "truncation refused"),
    (DispatchState.APPEND, DispatchState.APPEND, "push refused or timed out (resend from the match)"),
    (DispatchState.APPEND, DispatchState.COMPARE, "INCONSISTENT_STATE, or the follower lost its log"),
))


class Inflight(NamedTuple):
    """One APPEND push sent and not answered yet."""

    first: int
    count: int
    sent_ms: int


class Inflights(dict):
    """The APPEND pushes in flight to one follower, by first index, oldest first (at most
    ``capacity``).

    The first index only grows while any push is in flight (every reset of ``next`` clears
    the window). A ``dict`` underneath, so that ``len`` and truth tests on the hot path cost
    no Python call."""

    __slots__ = ("capacity",)

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def full(self) -> bool:
        return len(self) >= self.capacity

    def add(self, first: int, count: int, sent_ms: int) -> None:
        self[first] = Inflight(first, count, sent_ms)

    def oldest(self) -> Inflight:
        return next(iter(self.values()))

    def ack(self, first: int, count: int) -> None:
        """The push of ``count`` entries from ``first`` was answered."""
        sent = self.get(first)
        if sent is not None and sent.count == count:
            del self[first]


class FollowerProgress:
    __slots__ = ("peer", "state", "next", "match", "inflights", "control_sent_ms", "control_seq",
                 "retry_at", "commit_sent", "commit_outstanding", "quota_second", "quota_bytes", "last_push_ms",
                 "recovering", "epoch", "incarnation")

    def __init__(self, peer: str, next_index: int, max_inflight: int) -> None:
        self.peer = peer
        self.state = DispatchState.COMPARE
        self.next = next_index
        self.match = -1
        self.inflights = Inflights(max_inflight)
        self.control_sent_ms = -1
        self.control_seq = 0
        self.retry_at = 0
        self.commit_sent = -1
        self.commit_outstanding = False
        self.quota_second = -1
        self.quota_bytes = 0
        self.last_push_ms = 0
        self.recovering = False
        self.epoch = 0
        self.incarnation = 0

    def __repr__(self) -> str:
        return (f"FollowerProgress({self.peer} {self.state.value} match={self.match} next={self.next} "
                f"inflight={len(self.inflights)})")

    # -- transitions ------------------------------------------------------------------------
    def _become(self, state: DispatchState) -> None:
        TRANSITIONS.check(self.state, state, self.peer)
        self.inflights.clear()
        self.control_sent_ms = -1
        self.control_seq += 1
        self.state = state

    def become_compare(self, next_index: int) -> None:
        """Compare (again) at ``next_index - 1``: after a mismatch lower down, after a refused
        truncation or push, or with a follower that lost its log."""
        self._become(DispatchState.COMPARE)
        self.next = next_index

    def become_truncate(self) -> None:
        self._become(DispatchState.TRUNCATE)

    def become_append(self) -> None:
        """Append from ``match + 1``: after the truncation, or to resend what was not answered."""
        self._become(DispatchState.APPEND)
        self.next = self.match + 1

    # -- what the follower told us ------------------------------------------------------------
    def on_compare_match(self, index: int) -> None:
        """The follower holds the leader's entry ``index``: truncate what follows it."""
        if index > self.match:
            self.match = index
        self.become_truncate()

    def on_append_ack(self, first: int, count: int) -> None:
        """The push of ``count`` entries from ``first`` was written."""
        self.inflights.ack(first, count)
        last = first + count - 1
        if last > self.match:
            self.match = last

    def lost_log(self, end_index: int, leader_end: int) -> None:
        """The follower now ends at ``end_index``, below what it acknowledged: its store was
        lost or replaced. Lower the water mark and compare again."""
        self.match = end_index
        self.become_compare(leader_end + 1)

    def recovery_starts(self, incarnation: int) -> bool:
        """Whether an answer saying ``recovering`` with ``incarnation`` starts a recovery:
        none runs, or it names another incarnation of the follower."""
        return not self.recovering or incarnation != self.incarnation

    def start_recovery(self, leader_end: int, incarnation: int = 0) -> None:
        """The follower (``incarnation``) answered ``recovering``: what it acknowledged in an
        earlier life is forgotten (water mark -1), answers to earlier pushes are ignored, and
        the dispatcher compares again from the leader's end."""
        self.recovering = True
        self.incarnation = incarnation
        self.epoch += 1
        self.match = -1
        self.become_compare(leader_end + 1)

    # -- the outstanding COMPARE / TRUNCATE -----------------------------------------------------
    def control_sent(self, now: int) -> int:
        """A COMPARE or TRUNCATE left at ``now``; returns the sequence its answer must carry."""
        self.control_sent_ms = now
        return self.control_seq

    def give_up_control(self) -> None:
        """The outstanding COMPARE or TRUNCATE is given up (its answer will be ignored)."""
        self.control_seq += 1

    def control_answered(self) -> None:
        self.control_sent_ms = -1

    # -- pushes -----------------------------------------------------------------------------
    def append_sent(self, first: int, count: int, now: int, commit_index: int) -> None:
        self.inflights.add(first, count, now)
        self.last_push_ms = now
        self.next = first + count
        self.commit_sent = commit_index

    def commit_push_sent(self, now: int, commit_index: int) -> None:
        self.commit_outstanding = True
        self.commit_sent = commit_index
        self.last_push_ms = now

    def commit_answered(self) -> None:
        """The idle COMMIT push was answered (or given up)."""
        self.commit_outstanding = False

    def compare_no_lower_than(self, index: int) -> None:
        """COMPARE at ``index`` at the lowest: the first entry this leader still holds (a
        follower that needs entries before it is compared there, and refuses)."""
        if self.next < index + 1:
            self.next = index + 1

    # -- pacing -----------------------------------------------------------------------------
    def pause_until(self, when: int) -> None:
        """Send nothing to this follower before ``when`` (a refusal, a failed read of the
        leader's own log, or a spent quota)."""
        self.retry_at = when

    def quota_spent(self, now: int, quota: int) -> bool:
        """Whether this second's ``quota`` of bytes to a lagging follower is spent; if so,
        nothing more goes to it before the next second."""
        second = now // 1000
        if self.quota_second != second:
            self.quota_second, self.quota_bytes = second, 0
        if self.quota_bytes >= quota:
            self.pause_until((second + 1) * 1000)
            return True
        return False

    def charge_quota(self, nbytes: int) -> None:
        """``nbytes`` more were pushed to a lagging follower in this second."""
        self.quota_bytes += nbytes

    def recovery_ends(self) -> None:
        """The follower answered without ``recovering``: its water mark counts again."""
        self.recovering = False
