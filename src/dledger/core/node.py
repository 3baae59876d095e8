"""Node: one Raft member as a deterministic state machine (the sans-IO core).

The host (a driver) calls, always with the current time in milliseconds:
- ``tick(now_ms)`` when ``next_deadline_ms`` of the last ``Ready`` has come;
- ``receive(now_ms, envelope)`` for every envelope addressed to this node;
- ``propose(now_ms, token, bodies)``, ``read(now_ms, token, mode)``,
  ``get(now_ms, token, index, mode)``, ``transfer_leadership(now_ms, token, target)`` for
  local clients;
and after each call ``take_ready()``, which hands back one ``Ready``: the envelopes to send,
the client operations completed, the role changes, the commit and applied index, and the
next deadline. The contract (docs/architecture.md):

1. Everything in a ``Ready`` is already durable as far as it promises: the store is called
   synchronously, so a vote or term is persisted before the answer is in ``messages``, and
   an entry is written before the push that acknowledges it.
2. The driver sends ``messages`` in order (any order between peers is fine; the core
   tolerates loss, duplication and reordering), completes ``completions`` and tells role
   handlers about ``role_changes`` (each transition once, in term order).
3. The driver calls ``tick`` again at ``next_deadline_ms`` (or earlier; early ticks are
   harmless).

Every message from a peer is range-checked first (``protocol.check_in_range``): a term or
index no peer may send is refused before anything changes. A ``PeerProtocolError`` (the one
exception that means "the peer misbehaved": that check, or a handler finding bytes that do
not hold what the request says) is logged and the request answered UNEXPECTED_ARGUMENT (a
response is ignored); a store problem (``DLedgerError``) is answered with its code; any
other exception is a bug in the core and propagates to the host. Requests from peers get
their response in the same ``Ready`` unless a component parks them
(out-of-order pushes, leadership transfers); responses to this node's own requests are
matched by request id, and requests unanswered after ``rpc_timeout_ms`` are given up.

A member whose store is suspect recovers first (``core.rejoin``: it relearns its term from
the others, votes and counts toward commits only once caught up from a leader).

What happens to a message from a peer (the range check, the term gate, the step function of
the node's role) is ``core.step``, a mixin of this class. The node builds the member state and
the components, handing them state only (never a callable, never the node); they return
intents (``core.intents``), which the node applies in one loop (``_apply``), in order, each
fully before the next; answers to its own requests go to the part that owns their type
(``_answered``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from dledger.core.damaged_tail import DamagedTail
from dledger.core.entry_handler import EntryHandler
from dledger.core.entry_pusher import EntryPusher
from dledger.core.intents import (RANK, CommitHint, Complete, Fail, FailReads, Follow, HeardLeader, JoinTerm,
                                   PeerRecovering, ReadDone, ReadsConfirmed, Reply, Send, StandAside, StepDown,
                                   TailCut, TakeLeadership, Won)
from dledger.core.leader_elector import LeaderElector
from dledger.core.member_state import MemberState, Role, RoleChange, RoleEvent
from dledger.core.membership_change import Reconfiguring, _Change
from dledger.core.membership_sync import MembershipSync
from dledger.core.peers_check import PeersCheck
from dledger.core.rejoin import Rejoin
from dledger.core.peer_repair import Repairer
from dledger.core.round_trip import RoundTrips
from dledger.core.snapshot_receiver import SnapshotReceiver
from dledger.core.state_machine_caller import StateMachineCaller
from dledger.core.step import RESPONSE_OF, Stepping, _Get, _PeerReply, _Remote
from dledger.core.waiting import Waiting
from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL
from dledger.errors import DLedgerError
from dledger.protocol import (AppendEntryResponse, DLedgerResponseCode as Code, Envelope, GetEntriesResponse,
                              HeartBeatResponse, InstallSnapshotResponse, LeadershipTransferRequest,
                              LeadershipTransferResponse,
                              PullEntriesResponse, PushEntryResponse, ReadMode, VoteResponse)

if TYPE_CHECKING:
    from dledger.store import LogStore

#: passes of ``Node._after`` before it declares the node unsettled: far more than any input
#: needs (a pass is repeated only for a role change made during the one before, and an entry
#: point makes a few at most)
MAX_SETTLE_PASSES = 64

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Completion:
    """A local client operation finished: ``response`` (code, index, term, pos, leader_id),
    plus whatever the state machine answered for it."""

    token: Any
    response: Any
    result: Any = None


@dataclass(slots=True)
class Ready:
    messages: list[Envelope] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    role_changes: list[RoleChange] = field(default_factory=list)
    committed_index: int = -1
    applied_index: int = -1
    next_deadline_ms: int | None = None


class _Rpc(NamedTuple):
    """A request this node sent and still waits for: answers must come from ``peer`` with a
    ``response_type`` (which names the part that owns it, ``Node._answered``); ``ctx`` is what
    that part said to hand back with the answer; ``sent_ms`` and ``term`` tell whether a SUCCESS
    confirms this leadership."""

    ctx: Any
    deadline: int
    sent_ms: int
    term: int
    response_type: type
    peer: str


class Node(Stepping, Reconfiguring):
    def __init__(self, config, store: "LogStore", rng, *, state_machine=None, now_ms: int = 0,
                 applied_index: int | None = None, needs_snapshot: bool = False, snapshots=None,
                 snapshot_index: int = -1) -> None:
        """``applied_index``: what the state machine holds already (a snapshot loaded: the
        node applies only the log after it; default: nothing before the log's first entry);
        ``needs_snapshot``: the state cannot be rebuilt from this log (see
        ``StateMachineCaller``); ``snapshots``: this node's ``FileSnapshotStore`` when its state
        machine saves and loads snapshots (it installs the leader's and sends its own), and
        ``snapshot_index`` the newest one's index."""
        if not config.peer_map:
            config.validate()
        self.config = config
        self.store = store
        self.rng = rng
        self.now_ms = now_ms
        self.member_state = member = MemberState(config, store)
        #: the configuration, in step with the log (core/membership_sync.py)
        self.membership = MembershipSync(member, store, config)
        self.membership.load()
        if applied_index is None:
            applied_index = store.ledger_before_begin_index
        self.caller = StateMachineCaller(store, state_machine, applied_index)
        self.caller.needs_snapshot = needs_snapshot
        self.caller.snapshot_index = snapshot_index
        if not needs_snapshot and member.committed_index < applied_index <= store.ledger_end_index:
            member.committed_index = applied_index     # a snapshot holds only committed entries
        self.recovery = recovery = Rejoin(member, store, config, now_ms=now_ms)
        recovery.membership = self.membership
        # the elector draws its first vote delay from rng here, before the request ids below
        #: the slowest recent round trip to a peer: how long a vote round waits (core/round_trip.py)
        self.round_trips = RoundTrips()
        self.elector = LeaderElector(member, config, rng, now_ms=now_ms, recovery=recovery,
                                     round_trips=self.round_trips)
        self.pusher = EntryPusher(member, store, config, snapshots)
        receiver = SnapshotReceiver(store, snapshots, self.caller) if snapshots is not None else None
        self.handler = EntryHandler(member, store, config, recovery=recovery, caller=self.caller, receiver=receiver)
        self.tail = DamagedTail(member, store)
        self.repairer = Repairer(member, store, now_ms=now_ms)
        self.repairer.covered = snapshot_index
        #: members that disagree on the group's members refuse each other (core/peers_check.py)
        self.peers_check = PeersCheck(member)
        #: why this node knows no leader, logged every few seconds (core/waiting.py)
        self.waiting = Waiting(member, recovery, self.peers_check, config, now_ms=now_ms)
        self._messages: list[Envelope] = []
        self._completions: list[Completion] = []
        self._rpcs: dict[int, _Rpc] = {}
        self._rpc_order: deque = deque()          # (deadline, request id), in send order
        # request ids start at a random point so that answers meant for an earlier
        # incarnation of this node cannot be taken for answers to this one's requests
        self._next_rid = (rng.getrandbits(30) << 20) + 1
        # and so does this process's incarnation, which its recovery names (core.rejoin)
        recovery.incarnation = self._next_rid
        self._seen_changes = 0
        self._reacted = 0
        self.stopped = False
        member.tell_initial_role()
        self._after(now_ms)

    # =====================================================================================
    # effects, used by the components
    # =====================================================================================
    def send(self, peer: str, msg: Any, ctx: Any = None) -> int:
        rid = self._next_rid
        self._next_rid += 1
        deadline = self.now_ms + self.config.rpc_timeout_ms
        self._rpc_order.append((deadline, rid))
        self._rpcs[rid] = _Rpc(ctx, deadline, self.now_ms, self.member_state.curr_term,
                               RESPONSE_OF[type(msg)], peer)
        self._messages.append(Envelope(self.member_state.self_id, peer, rid, False, msg))
        return rid

    def reply(self, dst: str, rid: int, msg: Any) -> None:
        self._messages.append(Envelope(self.member_state.self_id, dst, rid, True, msg))

    def complete(self, token: Any, response: Any, result: Any = None) -> None:
        if isinstance(token, _PeerReply):
            self.reply(token.src, token.rid, response)
            return
        if isinstance(token, _Get):
            token, response, result = token.token, self._get_answer(token.index, response), None
        elif isinstance(token, _Change):
            (token, response), result = self._change_done(token, response), None
        if isinstance(token, _Remote):
            response.remote_id = token.src
            self.reply(token.src, token.rid, response)
        elif token is not None:
            self._completions.append(Completion(token, response, result))

    def fail(self, token: Any, code: int) -> None:
        member = self.member_state
        self.complete(token, AppendEntryResponse(group=member.group, local_id=member.self_id, code=int(code),
                                                 term=member.curr_term, leader_id=member.leader_id))

    def complete_read(self, token: Any, code: int, index: int) -> None:
        member = self.member_state
        self.complete(token, AppendEntryResponse(group=member.group, local_id=member.self_id, code=int(code),
                                                 term=member.curr_term, leader_id=member.leader_id, index=index))

    # =====================================================================================
    # entry points
    # =====================================================================================
    def tick(self, now_ms: int) -> None:
        now = self._clock(now_ms)
        if self._rpcs:
            self._expire_rpcs(now)
        self._apply(now, self.handler.tick(now))
        self._apply(now, self.pusher.check_timeouts(now))
        self._after(now)

    def receive(self, now_ms: int, env: Envelope) -> None:
        """Handle one envelope addressed to this node: ``step`` (``core.step``)."""
        self.step(now_ms, env)

    def propose(self, now_ms: int, token: Any, bodies: list, magic: int = MAGIC_NORMAL) -> None:
        """Append ``bodies`` as one batch; the completion carries index/pos of the last one."""
        self.propose_many(now_ms, [(token, bodies, magic)])

    def propose_many(self, now_ms: int, items: list[tuple[Any, list, int]]) -> None:
        now = self._clock(now_ms)
        self._apply(now, self.pusher.propose(now, items))
        self._after(now)

    def read(self, now_ms: int, token: Any, mode: ReadMode) -> None:
        """Complete ``token`` when reading the local state at the returned index is safe."""
        mode = ReadMode.parse(mode)
        now = self._clock(now_ms)
        self._read(now, token, mode)
        self._after(now)

    def get(self, now_ms: int, token: Any, index: int, mode: ReadMode = ReadMode.READ_INDEX_READ) -> None:
        """Complete ``token`` with a ``GetEntriesResponse``: the committed entry at ``index``
        once reading in ``mode`` is safe (the read of ``read``), INDEX_OUT_OF_RANGE beyond
        the commit index then, or the read's failure (NOT_LEADER with the leader's id when
        known, LEADER_TRANSFERRING, ...). UNSAFE_READ answers at once from this node's own log
        up to its commit index, whatever its role."""
        mode = ReadMode.parse(mode)
        now = self._clock(now_ms)
        self._read(now, _Get(token, index), mode)
        self._after(now)

    def _read(self, now: int, token: Any, mode: ReadMode) -> None:
        member = self.member_state
        if mode is ReadMode.UNSAFE_READ:
            self.complete_read(token, Code.SUCCESS, self.caller.applied_index)
        elif member.role is not Role.LEADER:
            self.complete_read(token, Code.NOT_LEADER, -1)
        elif member.transferee is not None:
            self.complete_read(token, Code.LEADER_TRANSFERRING, -1)
        elif mode is ReadMode.RAFT_LOG_READ or not self._read_safe():
            self._apply(now, self.pusher.propose(now, [(token, [], MAGIC_NOOP)]))
        elif mode is ReadMode.LEASE_READ and self.elector.lease_valid(now):
            self.complete_read(token, Code.SUCCESS, member.committed_index)
        else:
            self._apply(now, self.elector.register_read(now, token, member.committed_index))

    def transfer_leadership(self, now_ms: int, token: Any, transferee_id: str) -> None:
        now = self._clock(now_ms)
        member = self.member_state
        if transferee_id == member.self_id:
            code = Code.SUCCESS if member.role is Role.LEADER else Code.NOT_LEADER
            self.complete(token, LeadershipTransferResponse(group=member.group, local_id=member.self_id, code=code,
                                                            term=member.curr_term, leader_id=member.leader_id))
            self._after(now)
            return
        req = LeadershipTransferRequest(group=member.group, local_id=member.self_id, remote_id=member.self_id,
                                        term=member.curr_term, transfer_id=member.self_id, transferee_id=transferee_id)
        # the node's own request, of its own term, goes the way of a peer's (core.step)
        resp = self._step_raft(now, req, token)
        if resp is not None:
            self.complete(token, resp)
        self._after(now)

    def force_role(self, now_ms: int, leader_id: str, term: int | None = None) -> None:
        """Test harness only (DLedger's ``launchServer`` with the elector disabled): make this
        node the leader of ``term`` (default: its current term) if ``leader_id`` is itself,
        else a follower of ``leader_id``. The term is persisted first."""
        now = self._clock(now_ms)
        member = self.member_state
        self.recovery.force_clear()
        self.membership.adopt_bootstrap("roles are forced")
        if term is not None:
            member.adopt_term(term)
        if leader_id == member.self_id:
            self.store.persist_term(member.curr_term, member.self_id)
            self._apply(now, self.elector.become_leader(now, member.curr_term, forced=True))
        else:
            member.on_event(RoleEvent.FORCED_FOLLOWER, member.curr_term, leader_id)
            self.elector.heard_leader(now)
        self._after(now)

    def take_ready(self) -> Ready:
        changes = self.member_state.changes
        ready = Ready(self._messages, self._completions, changes[self._seen_changes:] if changes else [],
                      self.member_state.committed_index, self.caller.applied_index, self.next_deadline())
        self._messages = []
        self._completions = []
        self._seen_changes = len(changes)
        if changes and self._reacted == len(changes):
            changes.clear()
            self._seen_changes = self._reacted = 0
        return ready

    def has_ready(self) -> bool:
        return bool(self._messages or self._completions or len(self.member_state.changes) > self._seen_changes)

    def next_deadline(self) -> int | None:
        now = self.now_ms
        cands = [self.elector.next_deadline(now), self.pusher.next_deadline(now), self.handler.next_deadline(),
                 self.recovery.next_deadline(), self.repairer.next_deadline(now), self.tail.next_deadline(now)]
        if self._rpcs:
            cands.append(self._first_rpc_deadline())
        cands = [c for c in cands if c is not None]
        return max(min(cands), now) if cands else None

    def stop(self) -> None:
        """Fail everything pending (the node is shutting down): appends, reads, transfers,
        and the node's own outstanding requests (as if unanswered)."""
        self.stopped = True
        self._drop_parked_change(Code.INTERNAL_ERROR)
        self._apply(self.now_ms, self.pusher.fail_all(Code.INTERNAL_ERROR))
        self._apply(self.now_ms, self.elector.fail_pending(Code.INTERNAL_ERROR))
        rpcs, self._rpcs = self._rpcs, {}
        self._rpc_order.clear()
        for rpc in rpcs.values():
            try:
                self._answered(self.now_ms, rpc, None, None)
            except DLedgerError:
                pass
        self.caller.shutdown()

    # -- state, for hosts and tests -------------------------------------------------------
    @property
    def role(self) -> Role:
        return self.member_state.role

    @property
    def term(self) -> int:
        return self.member_state.curr_term

    @property
    def leader_id(self) -> str | None:
        return self.member_state.leader_id

    @property
    def committed_index(self) -> int:
        return self.member_state.committed_index

    def followers_need_from(self, window_ms: int) -> int | None:
        """On a leader: the lowest index a follower that answered within ``window_ms`` needs
        next (None: not a leader, or no such follower)."""
        if self.member_state.role is not Role.LEADER:
            return None
        contact = self.elector.heartbeats.contact
        need = None
        for peer, pr in self.pusher.progress.items():
            sent = contact.get(peer, -1)
            if sent < 0 or self.now_ms - sent > window_ms:
                continue
            if need is None or pr.match + 1 < need:
                need = pr.match + 1
        return need

    @property
    def applied_index(self) -> int:
        return self.caller.applied_index

    @property
    def self_id(self) -> str:
        return self.member_state.self_id

    # =====================================================================================
    # internals
    # =====================================================================================
    def _clock(self, now_ms: int) -> int:
        if now_ms > self.now_ms:
            self.now_ms = now_ms
        return self.now_ms

    def _read_safe(self) -> bool:
        """Whether this leader's commit index covers every append acknowledged before now:
        an entry of this leadership (appended after it began, not merely of its term) has
        committed. A leader re-elected in the term it led before a restart restores its
        commit index from a checkpoint that may lag what its earlier incarnation acknowledged;
        its entries of the same term do not prove the index current."""
        member = self.member_state
        c = member.committed_index
        return c >= 0 and c > self.store.ledger_before_begin_index and c > member.leader_base_index \
            and self.store.get_entry_term(c) == member.curr_term

    def _get_answer(self, index: int, read: Any) -> GetEntriesResponse:
        """What a get of ``index`` answers once its read completed with ``read``: the read's
        failure, INDEX_OUT_OF_RANGE beyond the commit index (every entry committed before the
        read began is within it: the read confirmed that), else the entry's record."""
        member = self.member_state
        resp = GetEntriesResponse(group=member.group, local_id=member.self_id, code=int(read.code),
                                  leader_id=member.leader_id, term=member.curr_term)
        if read.code != Code.SUCCESS:
            return resp
        if index > member.committed_index:
            resp.code = Code.INDEX_OUT_OF_RANGE
            return resp
        try:
            resp.entries = [bytes(self.store.get_raw(index))]
        except DLedgerError as exc:      # trimmed, or damaged and not repaired yet
            resp.code = int(exc.code)
        return resp

    def _first_rpc_deadline(self) -> int | None:
        order, rpcs = self._rpc_order, self._rpcs
        while order:
            deadline, rid = order[0]
            if rid in rpcs:
                return deadline
            order.popleft()
        return None

    def _expire_rpcs(self, now: int) -> None:
        order, rpcs = self._rpc_order, self._rpcs
        while order and order[0][0] <= now:         # (deadline, request id)
            _deadline, rid = order.popleft()
            rpc = rpcs.pop(rid, None)
            if rpc is not None:
                self._answered(now, rpc, None, None)

    def _after(self, now: int) -> None:
        """Run after every entry point until the node settles: passes of role reactions,
        recovery, elector, damaged tail, pusher and applying, until a pass tells no role
        change it has not reacted to (each pass runs its steps in the order their results
        feed each other, so only a new role change needs another pass). A node that does not
        settle within ``MAX_SETTLE_PASSES`` is a bug: an ``AssertionError`` names its state."""
        changes = self.member_state.changes
        for _ in range(MAX_SETTLE_PASSES):
            self._settle_pass(now)
            if len(changes) == self._reacted:
                break
        else:
            raise AssertionError(self._unsettled())
        self._repair(now)
        if self.membership.sync():
            self.pusher.members_changed()
        self.waiting.maintain(now, self.elector.voting.last_tally)

    def _settle_pass(self, now: int) -> None:
        if self.membership.sync():
            self.pusher.members_changed()
        self._react_to_role_changes(now)
        self._apply(now, self.recovery.maintain(now))
        self._maintain_roles(now)
        self._react_to_role_changes(now)
        if not self.stopped:
            self._apply(now, self.tail.pump(now, self.pusher.progress))
        self._apply(now, self.pusher.pump(now))
        caller = self.caller
        if self.member_state.committed_index > caller.applied_index:
            results = caller.on_committed(self.member_state.committed_index)
            self._apply(now, self.pusher.complete_applied(caller.applied_index, results))
        if caller.unreadable_index > caller.applied_index and not caller.needs_snapshot \
                and self.handler.receiver is not None and self.repairer.beyond_peers(caller.unreadable_index):
            log.error("%s: committed entry %d is damaged here and no peer holds a copy (the leader's log "
                      "begins after it): applying waits for the leader's snapshot",
                      self.member_state.self_id, caller.unreadable_index)
            caller.needs_snapshot = True
        self.repairer.covered = caller.snapshot_index
        if self._parked_change is not None:
            self._retry_parked_change(now)


    def _unsettled(self) -> str:
        member = self.member_state
        changes = member.changes
        recent = ", ".join(f"{c.role.value} in term {c.term}" for c in changes[-6:])
        return (f"{member.self_id} did not settle after {MAX_SETTLE_PASSES} passes at {self.now_ms} ms: "
                f"{len(changes) - self._reacted} role change(s) not reacted to, the last ones {recent}; "
                f"now {member!r}")

    def _react_to_role_changes(self, now: int) -> None:
        changes = self.member_state.changes
        while self._reacted < len(changes):
            change = changes[self._reacted]
            self._reacted += 1
            self.pusher.on_role_change(now, change)
            self._apply(now, self.handler.on_role_change(change))
            self._apply(now, self.elector.on_role_change(change))
            member = self.member_state
            if change.role is Role.LEADER and member.committed_index < self.store.ledger_end_index \
                    and (self.config.enable_fast_advance_commit_index
                         or member.history.uncommitted(member.committed_index)):
                # (a change of the members left uncommitted commits only through an entry of this
                # term: without it, a leader its own newest configuration leaves out would lead for ever)
                self._apply(now, self.pusher.propose(now, [(None, [], MAGIC_NOOP)]))

    # -- repair of damaged entries (core/peer_repair.py) ---------------------------------------
    def _repair(self, now: int) -> None:
        """Scrub and repair damaged entries of the store from peers (never changes roles)."""
        if not self.stopped:
            self._apply(now, self.repairer.pump(now))

    # -- intents (core/intents.py) ------------------------------------------------------------
    def _apply(self, now: int, intents) -> None:
        """Apply ``intents`` in order, each fully before the next: what applying one returns is
        applied first (depth first: the order the calls would have run in). Applying an intent
        returns only intents of a lower rank (``intents.RANK``; asserted), so this ends."""
        for intent in intents:
            kind = type(intent)
            if kind is Send:
                self.send(intent.peer, intent.msg, intent.ctx)
            elif kind is Reply:
                self.reply(intent.dst, intent.request_id, intent.msg)
            elif kind is Complete:
                self.complete(intent.token, intent.response, intent.result)
            elif kind is Fail:
                self.fail(intent.token, intent.code)
            elif kind is ReadDone:
                self.complete_read(intent.token, intent.code, intent.index)
            else:
                then = self._effect(now, intent)
                if then:
                    rank = RANK[kind]
                    assert all(RANK[type(t)] < rank for t in then), (intent, then)
                    self._apply(now, then)

    def _effect(self, now: int, intent: Any):
        """What an intent other than a leaf does (which part applies it), and what that returns
        to apply in turn."""
        elector = self.elector
        kind = type(intent)
        if kind is StepDown:
            elector.become_candidate(now, intent.term, intent.event, intent.why)
        elif kind is JoinTerm:
            elector.join_term(now, intent.term, intent.event, intent.why)
        elif kind is Follow:
            elector.follow(intent.term, intent.leader)
        elif kind is Won:
            return elector.become_leader(now, intent.term, votes=intent.votes)
        elif kind is StandAside:
            elector.step_aside(now)
        elif kind is TakeLeadership:
            elector.take_leadership(now, intent.target, intent.token)
        elif kind is HeardLeader:
            elector.heard_leader(now)
        elif kind is ReadsConfirmed:
            return elector.reads.confirmed(intent.sent_at)
        elif kind is FailReads:
            return elector.reads.fail(intent.code)
        elif kind is CommitHint:
            self.handler.commit_hint(intent.term, intent.index)
        elif kind is PeerRecovering:
            return self.pusher.peer_recovering(now, intent.peer, intent.following, intent.incarnation)
        elif kind is TailCut:
            self.membership.cut_at(intent.index)
            return self.pusher.log_cut(now, intent.index)
        else:
            raise AssertionError(f"{self.member_state.self_id}: no way to apply {intent!r}")
        return None

    # -- answers to this node's requests, to the part that asked -----------------------------------
    def _answered(self, now: int, rpc: _Rpc, src: str | None, resp: Any, higher: int | None = None) -> None:
        """Hand ``resp`` (None: unanswered) to the part that owns requests of its type, with the
        ``ctx`` it gave, and apply what it returns; ``higher``: the term gate's verdict."""
        kind, ctx = rpc.response_type, rpc.ctx
        if kind is PushEntryResponse or kind is InstallSnapshotResponse:
            self._apply(now, self.pusher.on_answer(now, resp, ctx, higher))
        elif kind is HeartBeatResponse:
            self._apply(now, self.elector.heartbeats.on_answer(now, src, resp, ctx, higher))
        elif kind is VoteResponse:
            self._apply(now, self.elector.voting.on_answer(now, src, resp, ctx, higher))
        elif kind is LeadershipTransferResponse:
            self._apply(now, self.elector.transfer.on_answer(resp, ctx))
        elif kind is PullEntriesResponse:
            index, peer = ctx
            if resp is not None:
                self.tail.heard(now, index, peer, resp)      # the damaged tail judges absent answers
            self.repairer.on_answer(now, index, peer, resp)
        else:                                                # MetadataResponse
            self.recovery.on_answer(now, src, resp, ctx)
