"""FollowerProgress: what the leader knows about one follower's log, and the dispatcher
state that drives replication to it (DLedger's ``EntryDispatcher`` state, shaped like etcd's
``tracker.Progress``).

States change by event: ``TRANSITIONS`` maps (state, ``DispatchEvent``) to the new state, and
an event it has no edge for in the current state raises ``IllegalTransition``. Every field
changes only through a named method of the progress (as etcd's ``tracker.Progress``), each
event through its own (``compare_mismatch``, ``truncated``, ``push_refused`` ...): the pusher
reads the fields and calls the methods, never assigns one::

    COMPARE --COMPARE_MATCHED--> TRUNCATE --TRUNCATED--> APPEND --APPEND_INCONSISTENT--> COMPARE
    COMPARE, TRUNCATE, APPEND --BEHIND_BEGIN--> INSTALL_SNAPSHOT --INSTALLED--> TRUNCATE

INSTALL_SNAPSHOT moves the follower's log start to this leader's (its next entry was removed
by retention or a reset here): one install in flight at a time, as a COMPARE.

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
- ``control_sent_ms`` / ``control_seq``: the outstanding COMPARE, TRUNCATE or install request
  (``-1``: none; in APPEND always ``-1``); an answer counts only if it carries the
  current ``control_seq``, which every state change and every give-up moves on;
- ``retry_at``: nothing is sent to this follower before then (``pause_until``);
- ``commit_sent`` / ``commit_outstanding``: the commit index last forwarded, and whether an
  idle COMMIT push is unanswered;
- ``quota_second`` / ``quota_bytes``: bytes pushed in the current second to a lagging follower;
- ``last_push_ms``: when the last APPEND or COMMIT push left;
- ``recovering``: the follower said it is recovering (protocol-aware recovery,
  ``core.rejoin``): its water mark counts toward no commit until an answer without the flag;
  ``epoch`` moves on when that starts, and answers to pushes sent before are ignored (they may
  come from its earlier incarnation); ``incarnation`` is the one it named then, which every
  push to it echoes while it recovers (only such a push can end its recovery). An answer
  naming another incarnation (the follower restarted again) starts it anew.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from dledger.core.transitions import TransitionTable
from dledger.protocol import DLedgerResponseCode as Code


class DispatchState(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"
    COMMIT = "COMMIT"


class DispatchEvent(Enum):
    """What moves a dispatcher: the key of ``TRANSITIONS``."""

    #: the follower holds the compared entry
    COMPARE_MATCHED = "compare matched"
    #: INCONSISTENT_STATE to a COMPARE: compare again lower down
    COMPARE_MISMATCH = "compare mismatch"
    #: any other refusal of a COMPARE: compare again at the same index, later
    COMPARE_REFUSED = "compare refused"
    #: the follower dropped its unverified tail
    TRUNCATED = "truncated"
    #: the TRUNCATE was refused: compare again from the leader's end
    TRUNCATE_REFUSED = "truncate refused"
    #: INCONSISTENT_STATE to an APPEND push: compare again from the leader's end
    APPEND_INCONSISTENT = "append inconsistent"
    #: a push was refused: resend from the match index
    PUSH_REFUSED = "push refused"
    #: the oldest push in flight went unanswered for ``max_push_timeout_ms``: resend
    PUSH_TIMED_OUT = "push timed out"
    #: the follower ends below what it acknowledged (its store was lost or replaced)
    LOG_LOST = "log lost"
    #: the follower answered ``recovering`` (``core.rejoin``): compare again from the end
    FOLLOWER_RECOVERING = "follower recovering"
    #: the follower needs an entry at or below this leader's before-begin index: move its
    #: log start there instead (an install)
    BEHIND_BEGIN = "behind the begin"
    #: the follower's log now starts where this leader's does: truncate what follows
    INSTALLED = "installed"
    #: the install was refused: compare again from the leader's end
    INSTALL_REFUSED = "install refused"


#: The dispatcher's transitions, keyed by event (``FollowerProgress`` takes the state this
#: table gives; a (state, event) pair not in it raises ``IllegalTransition``). COMMIT is
#: DLedger's value but never entered: commit pushes happen inside APPEND. INSTALL_SNAPSHOT
#: moves a commit log's start (no snapshot data yet). docs/architecture.md draws this table.
TRANSITIONS: TransitionTable[DispatchState, DispatchEvent] = TransitionTable("dispatcher", {
    DispatchState.COMPARE: {
        DispatchEvent.COMPARE_MISMATCH: DispatchState.COMPARE,
        DispatchEvent.COMPARE_REFUSED: DispatchState.COMPARE,
        DispatchEvent.FOLLOWER_RECOVERING: DispatchState.COMPARE,
        DispatchEvent.COMPARE_MATCHED: DispatchState.TRUNCATE,
        DispatchEvent.BEHIND_BEGIN: DispatchState.INSTALL_SNAPSHOT,
    },
    DispatchState.TRUNCATE: {
        DispatchEvent.TRUNCATED: DispatchState.APPEND,
        DispatchEvent.TRUNCATE_REFUSED: DispatchState.COMPARE,
        DispatchEvent.FOLLOWER_RECOVERING: DispatchState.COMPARE,
        DispatchEvent.BEHIND_BEGIN: DispatchState.INSTALL_SNAPSHOT,
    },
    DispatchState.INSTALL_SNAPSHOT: {
        DispatchEvent.INSTALLED: DispatchState.TRUNCATE,
        DispatchEvent.INSTALL_REFUSED: DispatchState.COMPARE,
        DispatchEvent.FOLLOWER_RECOVERING: DispatchState.COMPARE,
    },
    DispatchState.APPEND: {
        DispatchEvent.PUSH_REFUSED: DispatchState.APPEND,
        DispatchEvent.PUSH_TIMED_OUT: DispatchState.APPEND,
        DispatchEvent.APPEND_INCONSISTENT: DispatchState.COMPARE,
        DispatchEvent.LOG_LOST: DispatchState.COMPARE,
        DispatchEvent.FOLLOWER_RECOVERING: DispatchState.COMPARE,
        DispatchEvent.BEHIND_BEGIN: DispatchState.INSTALL_SNAPSHOT,
    },
})


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
    def _on(self, event: DispatchEvent) -> None:
        """``event`` happened: take the state ``TRANSITIONS`` gives (``IllegalTransition``, with
        nothing changed, when it has none). Every change clears the pushes in flight and moves
        ``control_seq`` on; entering APPEND sets ``next`` to ``match + 1`` (where COMPARE
        starts is the named method's)."""
        state = TRANSITIONS.next_state(self.state, event, self.peer)
        self.inflights.clear()
        self.control_sent_ms = -1
        self.control_seq += 1
        self.state = state
        if state is DispatchState.APPEND:
            self.next = self.match + 1

    def compare_mismatch(self, next_index: int) -> None:
        """INCONSISTENT_STATE to a COMPARE: compare again at ``next_index - 1`` (lower down)."""
        self._on(DispatchEvent.COMPARE_MISMATCH)
        self.next = next_index

    def compare_refused(self) -> None:
        """Any other refusal of a COMPARE: compare again at the same index."""
        self._on(DispatchEvent.COMPARE_REFUSED)

    def truncated(self) -> None:
        """The follower dropped what follows the match: append from ``match + 1``."""
        self._on(DispatchEvent.TRUNCATED)

    def truncate_refused(self, leader_end: int) -> None:
        """The TRUNCATE was refused: compare again from the leader's end."""
        self._on(DispatchEvent.TRUNCATE_REFUSED)
        self.next = leader_end + 1

    def append_inconsistent(self, leader_end: int) -> None:
        """INCONSISTENT_STATE to an APPEND push: compare again from the leader's end."""
        self._on(DispatchEvent.APPEND_INCONSISTENT)
        self.next = leader_end + 1

    def push_refused(self) -> None:
        """A push was refused: resend from ``match + 1``."""
        self._on(DispatchEvent.PUSH_REFUSED)

    def push_timed_out(self) -> None:
        """The oldest push in flight went unanswered: resend from ``match + 1``."""
        self._on(DispatchEvent.PUSH_TIMED_OUT)

    def behind_begin(self) -> None:
        """The follower needs an entry this leader no longer holds: move its log start."""
        self._on(DispatchEvent.BEHIND_BEGIN)

    def installed(self, index: int) -> None:
        """The follower's log now starts after ``index`` (this leader's before-begin index),
        which it holds with this leader's term: truncate what follows it."""
        self._on(DispatchEvent.INSTALLED)
        if index > self.match:
            self.match = index

    def install_refused(self, leader_end: int) -> None:
        """The install was refused: compare again from the leader's end."""
        self._on(DispatchEvent.INSTALL_REFUSED)
        self.next = leader_end + 1

    # -- what the follower told us ------------------------------------------------------------
    def on_compare_match(self, index: int) -> None:
        """The follower holds the leader's entry ``index``: truncate what follows it."""
        self._on(DispatchEvent.COMPARE_MATCHED)
        if index > self.match:
            self.match = index

    def on_append_ack(self, first: int, count: int) -> None:
        """The push of ``count`` entries from ``first`` was written."""
        self.inflights.ack(first, count)
        last = first + count - 1
        if last > self.match:
            self.match = last

    def lost_log(self, end_index: int, leader_end: int) -> None:
        """The follower now ends at ``end_index``, below what it acknowledged: its store was
        lost or replaced. Lower the water mark and compare again."""
        self._on(DispatchEvent.LOG_LOST)
        self.match = end_index
        self.next = leader_end + 1

    def recovery_starts(self, incarnation: int) -> bool:
        """Whether an answer saying ``recovering`` with ``incarnation`` starts a recovery:
        none runs, or it names another incarnation of the follower."""
        return not self.recovering or incarnation != self.incarnation

    def start_recovery(self, leader_end: int, incarnation: int = 0) -> None:
        """The follower (``incarnation``) answered ``recovering``: what it acknowledged in an
        earlier life is forgotten (water mark -1), answers to earlier pushes are ignored, and
        the dispatcher compares again from the leader's end."""
        self._on(DispatchEvent.FOLLOWER_RECOVERING)
        self.recovering = True
        self.incarnation = incarnation
        self.epoch += 1
        self.match = -1
        self.next = leader_end + 1

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


def retry_delay(code: int, heartbeat_interval_ms: int) -> int:
    """How long a dispatcher waits after a refusal ``code``: NOT_FOLLOWER right after an
    election means the push overtook the first heartbeat, so soon; anything else a heartbeat
    interval."""
    return max(1, heartbeat_interval_ms // 10) if code == Code.NOT_FOLLOWER else heartbeat_interval_ms
