"""DamagedTail: a leader stuck on a damaged entry that no peer gives it a copy of.

A leader never pushes an entry its store refuses (``core.peer_repair``): a follower that needs it
waits until the repairer has rewritten it from a peer's copy. When no peer holds a copy (the
entry was written here and never replicated) the leader would wait forever and the group
would commit nothing again. This component decides, by protocol, between two ways out:

- **cut**: the lowest damaged entry ``i`` above the commit index was never committed, when the
  answers to this leadership's repair pulls (``PullEntriesResponse.absent``: the answering
  log ends before ``i``; ``recovering``: the answerer may have lost entries it acknowledged)
  prove it:

  a) voters that every quorum meets (``n - q + 1`` of them) answered ``absent`` while not
     recovering. Raft never takes a committed entry out of a log that stored it, and a member
     that lost entries says ``recovering`` until it has caught up from a leader (whose log holds
     every committed entry), so none of them ever stored entry ``i`` as committed, and no
     quorum did;
  b) every other voter answered ``absent``, some of them recovering, in a group of three or
     more. No member then holds an intact copy. A committed entry keeps one: it was stored by a
     quorum, and damage or lost data (a power cut in ``page_cache`` mode, a wiped disk) strike at
     most a minority of the members, of which this leader, whose copy is damaged, is one; the
     others of that quorum hold it intact and would have sent it. (This is the fault model
     under which damage is repairable at all. Outside it, with every other copy lost and this
     one damaged, the entry is gone either way: without this rule the group would wait for it
     forever.)

  Entries after an uncommitted one are uncommitted too, and none of them was acknowledged to
  a client: the leader truncates its log at ``i`` and says so (``TailCut(i)``: the pusher
  fails its pending appends from ``i`` and compares again, a no-op of the current term
  follows) and goes on from the shorter log. An entry at or below the commit index is never
  cut, whatever the answers.
- **stepping aside**: otherwise, once a follower has waited ``STEP_ASIDE_MS`` at the lowest
  damaged entry while the commit index stood still, the leader steps down and stands again
  only after the others had a chance (``StandAside()``, applied by the elector): a member with
  an intact copy may lead, and the answers of the next leadership are asked afresh.

Answers count only within one leadership (they are dropped when the role or term changes);
each peer's latest answer for an index is the one kept.

State: the member state and the store. ``pump(now, progress)`` is handed the pusher's
``FollowerProgress`` per follower (does a follower still need the entry?) and returns its
intents (``core.intents``); ``heard`` is handed the answers to the repairer's pulls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dledger.core.follower_progress import FollowerProgress
from dledger.core.intents import NONE, StandAside, TailCut
from dledger.core.member_state import MemberState, Role
from dledger.core.quorum import Majority
from dledger.errors import DLedgerError

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)

#: how long a follower waits at the leader's damaged entry, the commit index standing still,
#: before a leader that can neither repair nor cut it steps aside
STEP_ASIDE_MS = 3_000
#: pause between looks at the store's damaged entries (an answer makes the next look at once)
LOOK_STEP_MS = 100


def never_committed(majority: Majority, self_id: str, absent: dict[str, bool]) -> str | None:
    """Why the entry that ``absent``'s peers do not hold (peer -> whether it was recovering
    when it answered) was never committed, or None when the answers do not prove it (the
    rules (a) and (b) of the module docstring; ``self_id`` holds a damaged copy)."""
    sound = [p for p, recovering in absent.items() if not recovering and p != self_id]
    if majority.meets_every_quorum(sound):
        return f"{len(sound)} voters that are not recovering do not hold it: no quorum ever did"
    others = [v for v in majority.voters if v != self_id]
    if len(majority) - majority.size >= 1 and all(p in absent for p in others):
        return (f"no other voter holds it ({len(others) - len(sound)} of them recovering): no intact "
                f"copy exists, which a committed entry keeps")
    return None


class DamagedTail:
    def __init__(self, member_state: MemberState, store: "LogStore") -> None:
        self.member_state = member_state
        self.store = store
        #: the leadership the answers belong to (term), and per damaged index: peer -> whether
        #: it was recovering when it answered that its log ends before the index
        self._term = -1
        self._absent: dict[int, dict[str, bool]] = {}
        #: (lowest damaged index, commit index, since when) a follower waits there
        self._waiting: tuple[int, int, int] | None = None
        self._look_at = 0
        self.cuts = 0

    # -- answers to the repairer's pulls -------------------------------------------------------
    def heard(self, now: int, index: int, peer: str, resp) -> None:
        """``peer`` answered the repair pull of ``index`` with ``resp``."""
        if self.member_state.role is not Role.LEADER or self.member_state.curr_term != self._term:
            return
        answers = self._absent.setdefault(index, {})
        if resp.absent and not resp.entries:
            answers[peer] = bool(resp.recovering)
            self._look_at = now
        else:
            answers.pop(peer, None)

    # -- the crank --------------------------------------------------------------------------
    def _reset(self) -> None:
        self._absent.clear()
        self._waiting = None

    def next_deadline(self, now: int) -> int | None:
        """While a follower waits at a damaged entry: when the leader steps aside (the looks in
        between ride on the repairer's wake-ups, every ``REPAIR_STEP_MS`` while damage remains)."""
        if self.member_state.role is not Role.LEADER or self._waiting is None:
            return None
        return max(self._waiting[2] + STEP_ASIDE_MS, self._look_at)

    def pump(self, now: int, progress: Mapping[str, FollowerProgress]) -> tuple:
        """One look at the damaged entries (leader only); ``progress``: the pusher's view of
        each follower. Returns ``TailCut`` after cutting the log, ``StandAside`` when the
        leader must step aside, else nothing."""
        member = self.member_state
        if member.role is not Role.LEADER:
            if self._absent or self._waiting is not None:
                self._reset()
            self._term = -1
            return NONE
        if self._term != member.curr_term:
            self._reset()
            self._term = member.curr_term
        if now < self._look_at:
            return NONE
        self._look_at = now + LOOK_STEP_MS
        damaged = self.store.damaged()
        if not damaged:
            self._reset()
            return NONE
        for index in [i for i in self._absent if i not in damaged]:
            del self._absent[index]
        committed = member.committed_index
        above = next((i for i in damaged if i > committed), None)
        if above is not None:
            why = never_committed(member.majority, member.self_id, self._absent.get(above, {}))
            if why is not None:
                log.warning("%s: entry %d is damaged here and was never committed (%s): the log is cut "
                            "there", member.self_id, above, why)
                if self._cut(above):
                    self.cuts += 1
                    self._reset()
                    return (TailCut(above),)
        first = next(iter(damaged))
        if not self._lagging(first, progress):
            self._waiting = None
            return NONE
        if self._waiting is None or self._waiting[:2] != (first, committed):
            self._waiting = (first, committed, now)
            return NONE
        if now - self._waiting[2] >= STEP_ASIDE_MS:
            log.warning("%s: a follower has waited %d ms for damaged entry %d, which no peer gave a "
                        "copy of and which is not proven uncommitted: stepping aside", member.self_id,
                        now - self._waiting[2], first)
            self._reset()
            return (StandAside(),)
        return NONE

    def _lagging(self, index: int, progress: Mapping[str, FollowerProgress]) -> bool:
        """Does a follower still need entry ``index`` (its water mark is below it)?"""
        for peer in self.member_state.remote_peer_ids:
            pr = progress.get(peer)
            if (pr.match if pr is not None else -1) < index:
                return True
        return False

    def _cut(self, index: int) -> bool:
        """Cut the log at damaged entry ``index``, proven never committed; whether it now ends
        before it."""
        member, store = self.member_state, self.store
        try:
            store.truncate(index)
        except DLedgerError as exc:
            log.error("%s: cannot cut the log at damaged entry %d: %s", member.self_id, index, exc)
            return False
        return store.ledger_end_index < index
