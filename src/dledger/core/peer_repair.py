"""Repairer: damaged entries of the local store, found by a scrub and repaired from peers.

A store refuses an entry whose bytes fail a check (``store.damaged()`` lists them, each with
the error naming the file and offset): it is never returned to a client, never applied, never
pushed to a follower. This component makes the refusal temporary when a good copy exists:

- **scrub**: damage at rest is found even where nothing reads. After start and then every
  ``SCRUB_PERIOD_MS``, the whole log is read back (``store.get``), ``SCRUB_BATCH`` entries per
  step, a step every ``SCRUB_STEP_MS``; an entry that fails joins ``store.damaged()``.
- **local repair first**: ``store.repair(index)`` rebuilds a damaged index unit from an intact
  record (nothing to ask anyone).
- **repair from a peer**: otherwise ``PullEntriesRequest(begin_index=index)`` goes to one peer
  (the leader first when known, then the others in turn), at most ``MAX_ASKING`` entries at a
  time; a peer not answering within ``ASK_RETRY_MS`` is replaced by the next one. The answer's
  record is handed to ``store.repair(index, record)``, which writes it only after checking it
  is the same entry (CRC, index, term, pos, size against the local index unit: by Raft's log
  matching, one index and term name one entry, and replicas are byte-identical); a copy that
  fails is logged and the next peer is asked. An entry no peer holds intact stays refused:
  unavailable, never wrong. ``beyond_peers`` says when every peer answered without a copy and
  the leader's log no longer reaches it (its snapshot covers it): a node with a state machine
  then waits for the leader's snapshot instead (``StateMachineCaller.needs_snapshot``).
- **answering**: ``handle_pull`` answers a peer's ``PullEntriesRequest`` with the encoded record
  of ``begin_index`` if this node reads it intact (any role; the asker checks it), else with
  no record; the record of ``begin_index + 1``, read in the same step, follows it when intact
  (the asker's proof when its own record and index unit are both damaged: equal entries at
  ``index + 1`` mean equal logs up to there). The answer also says whether this node's log
  ends before ``begin_index`` (``absent``) and whether it is recovering: the node hands every
  answer to the damaged tail too, where a leader judges a damaged entry no peer holds
  (``core.damaged_tail``).

- **not counted**: ``damaged_up_to(index)`` tells the node that a match over ``index`` must not
  be acknowledged (the node answers such a push DISK_ERROR): a damaged copy never counts
  toward a commit.
- **covered**: an entry at or below ``covered`` (the newest durable snapshot's index here) is
  in a snapshot: committed, and never needed by this node's state again. Its damage is still
  repaired when a peer holds a copy, but not held against a match: the peers may all have
  trimmed it (swarm seed 4300093).

State: the member state and the store. ``pump`` returns the pulls to send (``Send`` intents,
``core.intents``, each with the index and the peer asked), and the node hands each answer back
to ``on_answer``. The component never changes roles, terms or the commit index.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dledger.core.intents import NONE, Send
from dledger.core.member_state import MemberState
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, PullEntriesRequest, PullEntriesResponse

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)

#: entries read back per scrub step, and the pause between steps and between passes
SCRUB_BATCH = 256
SCRUB_STEP_MS = 50
SCRUB_PERIOD_MS = 300_000
#: damaged entries asked for at once, and how long one peer gets to answer
MAX_ASKING = 16
ASK_RETRY_MS = 500
#: pause between looks at the store's damaged entries while some remain
REPAIR_STEP_MS = 100


class Repairer:
    def __init__(self, member_state: MemberState, store: "LogStore", *, now_ms: int = 0) -> None:
        self.member_state = member_state
        self.store = store
        #: next entry the scrub reads (None: no pass under way) and when it steps next; the
        #: first pass starts at once
        self._scrub_next: int | None = store.ledger_before_begin_index + 1
        self._scrub_at = now_ms
        #: damaged entry -> (peer asked, when)
        self._asking: dict[int, tuple[str, int]] = {}
        #: damaged entry -> how many peers were asked so far (picks the next one)
        self._turn: dict[int, int] = {}
        #: damaged entry -> the peers that answered without a copy, and those whose log
        #: begins after it
        self._no_copy: dict[int, set[str]] = {}
        self._gone: dict[int, set[str]] = {}
        self._repair_at = now_ms
        #: the highest index a durable snapshot here covers (the node keeps it up to date)
        self.covered = -1
        #: the last look found nothing damaged: no wake-up is needed for repair
        self._idle = False
        self.repaired = 0

    # =====================================================================================
    # the crank
    # =====================================================================================
    def pump(self, now: int) -> list[Send] | tuple:
        """A scrub step and a repair step when due; returns the pulls to send."""
        if now >= self._scrub_at:
            self._scrub(now)
        if now < self._repair_at:
            return NONE
        sends: list[Send] = []
        self._repair(now, sends)
        return sends

    def next_deadline(self, now: int) -> int | None:
        """When the node must wake for this component: while a scrub pass is under way or a
        repair is outstanding. Between passes the next one starts at the first event after
        ``SCRUB_PERIOD_MS`` (a node always has some: heartbeats, election timers)."""
        out = []
        if self._scrub_next is not None:
            out.append(self._scrub_at)
        if not self._idle:
            out.append(self._repair_at)
        return min(out) if out else None

    def _scrub(self, now: int) -> None:
        store = self.store
        lo, hi = store.ledger_before_begin_index + 1, store.ledger_end_index
        i = self._scrub_next if self._scrub_next is not None else lo
        i = max(i, lo)
        stop = min(hi, i + SCRUB_BATCH - 1)
        while i <= stop:
            try:
                store.get(i)
            except DLedgerError:
                pass                       # a damaged entry is noted by the store itself
            i += 1
        if i > hi:
            self._scrub_next = None
            self._scrub_at = now + SCRUB_PERIOD_MS
            self._repair_at = min(self._repair_at, now)
        else:
            self._scrub_next = i
            self._scrub_at = now + SCRUB_STEP_MS

    def _repair(self, now: int, sends: list[Send]) -> None:
        damaged = self.store.damaged()
        for index in [i for i in self._asking if i not in damaged]:
            del self._asking[index]
            self._turn.pop(index, None)
            self._no_copy.pop(index, None)
            self._gone.pop(index, None)
        if not damaged:
            # looked at again on the first event after a step (reads elsewhere may note
            # damage: a push, applying, a client's get), or when a scrub pass ends
            self._repair_at = now + REPAIR_STEP_MS
            self._idle = True
            return
        self._idle = False
        self._repair_at = now + REPAIR_STEP_MS
        for index in damaged:
            asked = self._asking.get(index)
            if asked is not None and now - asked[1] < ASK_RETRY_MS:
                continue
            if asked is None and self._repair_locally(index):
                continue
            if len(self._asking) >= MAX_ASKING and index not in self._asking:
                break
            self._ask(now, index, sends)

    def _repair_locally(self, index: int) -> bool:
        try:
            self.store.repair(index)
        except DLedgerError:
            return False
        self.repaired += 1
        return True

    def _peers(self) -> list[str]:
        member = self.member_state
        peers = sorted(member.remote_peer_ids)
        lead = member.leader_id
        if lead in peers:
            peers.remove(lead)
            peers.insert(0, lead)
        return peers

    def _ask(self, now: int, index: int, sends: list[Send]) -> None:
        peers = self._peers()
        if not peers:
            return
        turn = self._turn.get(index, 0)
        self._turn[index] = turn + 1
        peer = peers[turn % len(peers)]
        member = self.member_state
        self._asking[index] = (peer, now)
        req = PullEntriesRequest(group=member.group, local_id=member.self_id, remote_id=peer,
                                 leader_id=member.leader_id, term=member.curr_term,
                                 node_id=member.self_id, begin_index=index)
        sends.append(Send(peer, req, (index, peer)))

    def on_answer(self, now: int, index: int, peer: str, resp: PullEntriesResponse | None) -> None:
        """``peer``'s answer to the pull of ``index`` (None: it went unanswered)."""
        if resp is None or not isinstance(resp, PullEntriesResponse):
            return                          # unanswered: the next round asks another peer
        if index not in self.store.damaged():
            self._asking.pop(index, None)
            return
        for record in resp.entries[:1]:
            following = resp.entries[1] if len(resp.entries) > 1 else None
            try:
                self.store.repair(index, record, following)
            except DLedgerError as exc:
                log.warning("%s: the copy of entry %d from %s was refused: %s",
                            self.member_state.self_id, index, peer, exc)
                break
            self.repaired += 1
            self._asking.pop(index, None)
            self._turn.pop(index, None)
            log.warning("%s: entry %d repaired from %s's copy", self.member_state.self_id, index, peer)
            return
        # no usable copy there: ask the next peer at once
        self._no_copy.setdefault(index, set()).add(peer)
        if resp.code == Code.INDEX_LESS_THAN_LOCAL_BEGIN:
            self._gone.setdefault(index, set()).add(peer)
        if self._asking.get(index, (None,))[0] == peer:
            self._asking[index] = (peer, now - ASK_RETRY_MS)
            self._repair_at = min(self._repair_at, now)

    def beyond_peers(self, index: int) -> bool:
        """Has every peer answered the pull of damaged entry ``index`` without a copy, the
        leader among them because its log begins after it?"""
        member = self.member_state
        lead = member.leader_id
        return (lead is not None and lead in self._gone.get(index, ())
                and self._no_copy.get(index, set()) >= set(member.remote_peer_ids))

    def damaged_up_to(self, index: int) -> bool:
        """Is an entry at or below ``index`` damaged here (not to be counted as matching)?"""
        covered = self.covered
        return any(covered < i <= index for i in self.store.damaged())

    # =====================================================================================
    # answering a peer
    # =====================================================================================
    def handle_pull(self, req: PullEntriesRequest) -> PullEntriesResponse:
        """The record of ``req.begin_index`` if it reads intact here (else none)."""
        member = self.member_state
        entries: list[bytes] = []
        code = Code.SUCCESS
        try:
            entries.append(bytes(self.store.get_raw(req.begin_index)))
        except DLedgerError as exc:
            code = exc.code if isinstance(exc.code, int) else Code.INTERNAL_ERROR
        else:
            # the next record, read in the same step: the asker's proof when its own record and
            # index unit are both damaged (store/repair.py); an asker that does not need it
            # ignores it
            try:
                entries.append(bytes(self.store.get_raw(req.begin_index + 1)))
            except DLedgerError:
                pass
        store = self.store
        return PullEntriesResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                   leader_id=member.leader_id, code=int(code), term=member.curr_term,
                                   entries=entries, absent=store.ledger_end_index < req.begin_index,
                                   recovering=store.suspect is not None)
