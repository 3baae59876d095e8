"""Step: what a node does with a message from a peer, in the shape of etcd-raft's ``Step``.

``Node.step(now, envelope)`` (``Node.receive`` is the driver's name for it) runs, once per
message, in this order:

1. the range check (``protocol.check_in_range``): a term or index no peer may send is
   refused before anything changes (``PeerProtocolError``, answered UNEXPECTED_ARGUMENT);
2. an answer to one of this node's requests (``_step_answer``) is matched by request id, type
   and sender; the term gate says whether it claims a higher term
   (``term_gate.higher_term``), and it goes to the part that asked, with that verdict;
3. a request (``_step_request``) is checked for group and addressee; the requests of clients,
   repair pulls and metadata queries are served whatever the term; a Raft request (vote,
   heartbeat, push, install, leadership transfer) is first judged on who sent it (each part's
   ``admit``), then passes **the term gate** (``term_gate.judge``): a lower term gets the one
   answer, a higher term makes this node join it (with DLedger's exceptions: leader stickiness,
   REJECT_TERM_NOT_READY, pushes and installs that move no term, transfers that move no term), both after
   the gate's intents are applied;
4. a request of this node's term goes to the step function of its role (``_step_leader``,
   ``_step_candidate``, ``_step_follower``), over the parts: vote, heartbeat, entry handler,
   leadership transfer.

The per-role step functions, for a request of this node's term:

==========================  =====================  ===========================  =====================
request                     leader                 candidate                    follower
==========================  =====================  ===========================  =====================
``HeartBeatRequest``        INCONSISTENT_LEADER    follow its leader, SUCCESS   SUCCESS from its leader,
                                                                                else INCONSISTENT_LEADER
``VoteRequest``             the voter's rules      the voter's rules            the voter's rules
``PushEntryRequest``        NOT_FOLLOWER           NOT_FOLLOWER                 the entry handler
``LeadershipTransferReq.``  start the transfer     NOT_LEADER                   NOT_LEADER
``InstallSnapshotRequest``  NOT_FOLLOWER           NOT_FOLLOWER                 the entry handler (moves
                                                                                the log start)
==========================  =====================  ===========================  =====================

A request is answered in the same ``Ready`` unless a part parks it (out-of-order pushes,
leadership transfers). A ``DLedgerError`` while serving (a store problem) is answered with its
code; a ``PeerProtocolError`` as the peer's fault; any other exception is a bug and reaches
the host.

Time moves the same way (``_maintain_roles``, after every entry point): DLedger's state
maintainer runs one step, the transferee's wait first, then the step of the node's role
(``_tick_leader``: heartbeat rounds, check-quorum, the preferred leader; ``_tick_follower``:
stand for election after an election timeout; a candidate's vote rounds), as etcd-raft's
``tickHeartbeat`` / ``tickElection``.

This is a mixin of ``Node`` (as the store's reader and writer are mixins of its façade): the
step functions call the node's parts and apply what they return (``core.intents``) through
``Node._apply`` at once, each where the part used to call back, so effects happen in the order
they always did.
"""

from __future__ import annotations

import logging
from typing import Any

from dledger.core import term_gate
from dledger.core.follower_progress import DispatchState
from dledger.core.intents import Follow, HeardLeader, StepDown
from dledger.core.membership import Configuration, MembershipError
from dledger.core.member_state import Role, RoleEvent
from dledger.entry import BODY_OFFSET, MAGIC_NORMAL
from dledger.errors import DLedgerError, PeerProtocolError
from dledger.protocol import (AppendEntryRequest, AppendEntryResponse, BatchAppendEntryRequest,
                              DLedgerResponseCode as Code, Envelope, GetEntriesRequest, GetEntriesResponse,
                              HeartBeatRequest, HeartBeatResponse, InstallSnapshotRequest, InstallSnapshotResponse,
                              LeadershipTransferRequest, LeadershipTransferResponse, MembershipRequest,
                              MembershipResponse, MetadataRequest, MetadataResponse, PullEntriesRequest, PullEntriesResponse, PushEntryRequest,
                              PushEntryResponse, PushEntryType, ReadMode, VoteRequest, VoteResponse,
                              VoteResult, check_in_range, parse_peers_text)

#: the node's logger: what ``Node.step`` logs keeps the name operators know (docs/operations.md)
log = logging.getLogger("dledger.core.node")

RESPONSE_OF = {
    VoteRequest: VoteResponse, HeartBeatRequest: HeartBeatResponse, PushEntryRequest: PushEntryResponse,
    AppendEntryRequest: AppendEntryResponse, BatchAppendEntryRequest: AppendEntryResponse,
    GetEntriesRequest: GetEntriesResponse, MetadataRequest: MetadataResponse,
    PullEntriesRequest: PullEntriesResponse, LeadershipTransferRequest: LeadershipTransferResponse,
    InstallSnapshotRequest: InstallSnapshotResponse, MembershipRequest: MembershipResponse,
}


class _Remote:
    """A token standing for a client request that came over the network."""

    __slots__ = ("src", "rid", "req")

    def __init__(self, src: str, rid: int, req: Any) -> None:
        self.src, self.rid, self.req = src, rid, req


class _PeerReply:
    """A token standing for a peer's Raft request answered later (a leadership transfer): its
    answer goes back as it is."""

    __slots__ = ("src", "rid")

    def __init__(self, src: str, rid: int) -> None:
        self.src, self.rid = src, rid


class _Get:
    """A token standing for a get waiting for its read: when the read completes, ``token``
    (a host's, or a ``_Remote``) is completed with the ``GetEntriesResponse`` for ``index``."""

    __slots__ = ("token", "index")

    def __init__(self, token: Any, index: int) -> None:
        self.token, self.index = token, index


class Stepping:
    """``Node.step`` and the per-role step functions (a mixin of ``Node``)."""

    # =====================================================================================
    # the entry point
    # =====================================================================================
    def step(self, now_ms: int, env: Envelope) -> None:
        """Handle one envelope addressed to this node (a peer's request, or an answer to one of
        this node's requests), then settle."""
        now = self._clock(now_ms)
        try:
            # a term or index no peer may send: refused before anything changes
            check_in_range(env.msg, self.member_state.curr_term)
            if env.is_response:
                self._step_answer(now, env)
            else:
                self._serve(now, env)
        except PeerProtocolError as exc:
            # the peer's fault: a request is answered UNEXPECTED_ARGUMENT, a response is
            # ignored (its request times out); builtin exceptions are bugs and propagate
            log.warning("%s: refused %s from %s: %s", self.member_state.self_id, type(env.msg).__name__,
                        env.src, exc)
            if not env.is_response and type(env.msg) in RESPONSE_OF:
                resp = self._error(env.msg, exc.code)
                resp.term = self.member_state.curr_term          # never echo the bad value
                self.reply(env.src, env.request_id, resp)
        self._after(now)

    # =====================================================================================
    # answers to this node's requests
    # =====================================================================================
    def _step_answer(self, now: int, env: Envelope) -> None:
        rpc = self._rpcs.get(env.request_id)
        if rpc is None or type(env.msg) is not rpc.response_type or env.src != rpc.peer:
            return
        del self._rpcs[env.request_id]
        self.round_trips.record(now - rpc.sent_ms)
        member = self.member_state
        msg = env.msg
        if getattr(msg, "code", None) == Code.SUCCESS and rpc.term == member.curr_term \
                and member.role is Role.LEADER and not isinstance(msg, PullEntriesResponse):
            # a repair pull is answered whatever the term and leader: it confirms nothing
            self.elector.note_contact(now, env.src, rpc.sent_ms)
        if getattr(msg, "code", None) == Code.PEERS_MISMATCH:
            self.peers_check.refused_by(now, env.src, getattr(msg, "members", ""))
        higher = term_gate.higher_term(msg, member.curr_term)
        try:
            self._answered(now, rpc, env.src, msg, higher)
        except DLedgerError as exc:
            log.error("%s: handling %s from %s failed: %s", member.self_id, type(msg).__name__, env.src, exc)

    # =====================================================================================
    # requests
    # =====================================================================================
    def _serve(self, now: int, env: Envelope) -> None:
        try:
            resp = self._step_request(now, env)
        except DLedgerError as exc:          # a store problem while serving a peer
            log.error("%s: %s failed: %s", self.member_state.self_id, type(env.msg).__name__, exc)
            resp = self._error(env.msg, exc.code)
        if resp is not None:
            self.reply(env.src, env.request_id, resp)

    def _step_request(self, now: int, env: Envelope) -> Any:
        """The answer to a request (None: none now, or later)."""
        req = env.msg
        member = self.member_state
        kind = type(req)
        if kind not in RESPONSE_OF:
            return None                              # a response type sent as a request: drop
        if req.group != member.group:
            return self._error(req, Code.UNKNOWN_GROUP)
        # -- requests served whatever the term ---------------------------------------------
        if kind is AppendEntryRequest or kind is BatchAppendEntryRequest:
            bodies = [req.body] if kind is AppendEntryRequest else list(req.batch_msgs)
            if not all(isinstance(b, bytes) for b in bodies):
                return self._error(req, Code.UNEXPECTED_ARGUMENT)
            self._apply(now, self.pusher.propose(now, [(_Remote(env.src, env.request_id, req), bodies, MAGIC_NORMAL)]))
            return None
        if kind is MetadataRequest:
            return self._metadata(req)
        if kind is MembershipRequest:
            # a client's change: answered once its entry commits (core.membership_change)
            self._change_membership(now, _Remote(env.src, env.request_id, req), req.op, req.node_id, req.address)
            return None
        if req.remote_id != member.self_id:
            return self._error(req, Code.UNKNOWN_MEMBER)
        if kind is PullEntriesRequest:
            return self.repairer.handle_pull(req)
        if kind is GetEntriesRequest:
            # answered when its read completes (at once for UNSAFE_READ and most failures)
            self._read(now, _Get(_Remote(env.src, env.request_id, req), req.begin_index), ReadMode(req.read_mode))
            return None
        # -- Raft requests: who sent it, the term gate, the role ------------------------------
        if kind is VoteRequest or kind is HeartBeatRequest:
            check = self.peers_check
            if not check.matches(req.members):           # its --peers differ: refused, loudly
                check.refusal(now, env.src, req.members)
                return self._members_refusal(req)
            check.agreed(env.src)
            if kind is HeartBeatRequest and member.configuration is None and req.config_index == -1 and req.members:
                # a leader whose group still has its bootstrap configuration names its members
                self.membership.learned_bootstrap(parse_peers_text(req.members), req.leader_id)
        asker = _PeerReply(env.src, env.request_id)
        if kind is LeadershipTransferRequest and req.transferee_id == member.self_id:
            # the transferee: it judges the term once its log has caught up
            resp, intents = self.elector.transfer.wait_to_take(now, req, asker)
            self._apply(now, intents)
            return resp
        return self._step_raft(now, req, asker)

    def _step_raft(self, now: int, req: Any, asker: Any) -> Any:
        """A Raft request (``asker``: who to answer later, if at all): admitted, gated, then
        the step function of this node's role."""
        member = self.member_state
        elector = self.elector
        kind = type(req)
        if kind is HeartBeatRequest:
            refusal = elector.heartbeats.admit(req)
        elif kind is VoteRequest:
            refusal = elector.voting.admit(req)
        elif kind is LeadershipTransferRequest:
            refusal = elector.transfer.admit(req)
        else:
            refusal = None
        if refusal is not None:
            return refusal
        verdict = term_gate.judge(req, member.curr_term,
                                  live_leader=kind is VoteRequest and elector.heartbeats.has_live_leader(now),
                                  leader=member.leader_id)
        if verdict.answer is not None:
            self._apply(now, verdict.intents)
            return self._refusal(req, verdict)
        role = member.role
        if role is Role.LEADER:
            return self._step_leader(now, req, asker)
        if role is Role.FOLLOWER:
            return self._step_follower(now, req, asker)
        return self._step_candidate(now, req, asker)

    def _members_refusal(self, req: Any) -> Any:
        """PEERS_MISMATCH, naming this node's members: no vote given, no leader followed."""
        elector = self.elector
        if type(req) is VoteRequest:
            resp = elector.voting.answer(req, VoteResult.UNKNOWN)
        else:
            resp = elector.heartbeats.answer(req, Code.PEERS_MISMATCH, self.member_state.curr_term)
        resp.code = Code.PEERS_MISMATCH
        resp.members = self.peers_check.text
        return resp

    def _refusal(self, req: Any, verdict: term_gate.Verdict) -> Any:
        """The answer the term gate decided for ``req``, built by the part that owns it."""
        elector = self.elector
        kind = type(req)
        if kind is HeartBeatRequest:
            return elector.heartbeats.answer(req, verdict.answer, verdict.term)
        if kind is VoteRequest:
            return elector.voting.answer(req, verdict.answer, verdict.term)
        if kind is PushEntryRequest or kind is InstallSnapshotRequest:
            return self.handler.answer(req, verdict.answer)
        return elector.transfer.answer(req, verdict.answer)

    # -- the role's step functions (a Raft request of this node's term) -------------------------
    def _step_leader(self, now: int, req: Any, asker: Any) -> Any:
        kind = type(req)
        if kind is HeartBeatRequest:
            return self.elector.heartbeats.answer(req, Code.INCONSISTENT_LEADER)    # another leader of this term
        if kind is VoteRequest:
            return self.elector.voting.vote(req)
        if kind is PushEntryRequest or kind is InstallSnapshotRequest:
            return self.handler.answer(req, Code.NOT_FOLLOWER)
        resp, intents = self.elector.transfer.start(now, req, asker, self.pusher.match_index(req.transferee_id))
        self._apply(now, intents)
        return resp

    def _step_candidate(self, now: int, req: Any, asker: Any) -> Any:
        kind = type(req)
        if kind is HeartBeatRequest:
            # a leader of this term: follow it
            self._apply(now, (Follow(req.leader_id, req.term),))
            return self._leader_heard(now, req)
        if kind is VoteRequest:
            return self.elector.voting.vote(req)
        if kind is PushEntryRequest or kind is InstallSnapshotRequest:
            return self.handler.answer(req, Code.NOT_FOLLOWER)   # (DLedger learns its leader from heartbeats)
        return self.elector.transfer.answer(req, Code.NOT_LEADER)

    def _step_follower(self, now: int, req: Any, asker: Any) -> Any:
        kind = type(req)
        if kind is HeartBeatRequest:
            if req.leader_id != self.member_state.leader_id:
                return self.elector.heartbeats.answer(req, Code.INCONSISTENT_LEADER)
            return self._leader_heard(now, req)
        if kind is VoteRequest:
            return self.elector.voting.vote(req)
        if kind is PushEntryRequest:
            handler = self.handler
            refusal = handler.admit(req)
            if refusal is not None:
                return refusal
            self._apply(now, (HeardLeader(),))          # a push proves the leader alive too
            resp, replies = handler.handle_push(now, asker.src, asker.rid, req)
            self._apply(now, replies)                   # parked pushes it drained or superseded first
            return self._unless_damaged(resp)
        if kind is InstallSnapshotRequest:
            handler = self.handler
            refusal = handler.admit(req)
            if refusal is not None:
                return refusal
            self._apply(now, (HeardLeader(),))
            if req.config:
                self._installing_config(req)
            resp, replies = handler.handle_install(req)
            self._apply(now, replies)
            return resp
        return self.elector.transfer.answer(req, Code.NOT_LEADER)

    def _leader_heard(self, now: int, req: HeartBeatRequest) -> HeartBeatResponse:
        heartbeats = self.elector.heartbeats
        self._apply(now, heartbeats.leader_heard(now, req))     # its commit index, for the entry handler
        return heartbeats.answer(req, Code.SUCCESS)

    # =====================================================================================
    # the passage of time: DLedger's state maintainer, one step per entry point
    # =====================================================================================
    def _maintain_roles(self, now: int) -> None:
        """The transferee's wait first, then the step of this node's role (as etcd-raft's
        ``tickElection`` / ``tickHeartbeat``). A store error (the term file could not be
        written) answers nothing on the unsaved state and retries after a heartbeat interval."""
        elector = self.elector
        if now < elector.backoff_until:
            return
        try:
            if elector.transfer.transfer_wait is not None:
                self._apply(now, elector.transfer.maintain(now))
            if not self.config.enable_leader_elector:
                elector.voting.maintain_forced()
                return
            role = self.member_state.role
            if role is Role.LEADER:
                self._tick_leader(now)
            elif role is Role.FOLLOWER:
                self._tick_follower(now)
            else:
                self._apply(now, elector.voting.maintain(now))          # the candidate's vote rounds
        except DLedgerError as exc:
            elector.failed_step(now, exc)

    def _tick_leader(self, now: int) -> None:
        """Heartbeat rounds and check-quorum, then the preferred leader; a store that failed a
        sync makes the leader step down (nothing it writes is durable any more)."""
        elector, member = self.elector, self.member_state
        if self.recovery.failed:
            elector.store_failed()
            self._apply(now, (StepDown(member.curr_term, RoleEvent.STORE_FAILED),))
            return
        config = member.configuration
        if config is not None and not config.is_voter(member.self_id) and config.index <= member.committed_index:
            # the committed configuration leaves this leader out (it led until the change that
            # removed it committed): the voters elect one of themselves
            self._apply(now, (StepDown(member.curr_term, RoleEvent.REMOVED,
                                       f"the configuration of entry {config.index} leaves it out"),))
            return
        self._apply(now, elector.heartbeats.maintain(now))
        if member.role is Role.LEADER and self.config.preferred_leader_ids \
                and elector.transfer.preferred_check_due(now):
            self._apply(now, elector.transfer.check_preferred(now, self.pusher.water_marks()))
        if member.role is Role.LEADER and self.caller.needs_snapshot:
            installing = {p for p, pr in self.pusher.progress.items() if pr.state is DispatchState.INSTALL_SNAPSHOT}
            self._apply(now, elector.transfer.hand_over(now, self.pusher.water_marks(), installing))

    def _tick_follower(self, now: int) -> None:
        """A follower that heard no leader for an election timeout stands for election, probing
        at once in its current term: it moves no term, and the answers tell whether the others
        lost the leader too (then the next round takes a new term)."""
        elector = self.elector
        heartbeats = elector.heartbeats
        if heartbeats.leader_silent(now):
            member = self.member_state
            why = f"nothing heard from {member.leader_id} for {now - heartbeats.last_leader_heartbeat_ms} ms"
            self._apply(now, (StepDown(member.curr_term, RoleEvent.ELECTION_TIMEOUT, why),))
            elector.voting.probe_now(now)

    # -- helpers ------------------------------------------------------------------------------
    def _metadata(self, req: MetadataRequest) -> MetadataResponse:
        member, store = self.member_state, self.store
        return MetadataResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                leader_id=member.leader_id, term=member.curr_term, peers=dict(member.peer_map),
                                ledger_end_index=store.ledger_end_index, vote_for=member.curr_vote_for,
                                role=member.role.value, ledger_end_term=store.ledger_end_term,
                                committed_index=member.committed_index,
                                waiting=self.waiting.reason(self.elector.voting.last_tally),
                                max_body_size=store.max_entry_size - BODY_OFFSET, **self._members_view())

    def _members_view(self) -> dict:
        """The configuration in force, for ``dledger status`` and ``member list`` (a leader adds
        each member's match index)."""
        member = self.member_state
        config = member.configuration
        if config is None:
            return {}
        view = {"voters": {k: member.peer_map.get(k, v) for k, v in config.voters.items()},
                "learners": {k: member.peer_map.get(k, v) for k, v in config.learners.items()},
                "config_index": max(config.index, -1)}
        if member.role is Role.LEADER:
            view["match_index"] = {p: self.pusher.match_index(p) for p in config.members}
        return view

    def _installing_config(self, req: InstallSnapshotRequest) -> None:
        """An install names the configuration in force at its index: the base from then on
        (recorded before the log start moves, ``core.membership_sync``)."""
        try:
            config = Configuration.decode(req.config, req.config_index, req.config_term)
        except MembershipError as exc:
            raise PeerProtocolError(f"install from {req.leader_id}: {exc}") from None
        self.membership.installed(config)

    def _unless_damaged(self, resp: Any) -> Any:
        """A follower does not acknowledge a match over an entry whose local copy is damaged
        (its index unit keeps the term, but the copy must not count toward a commit): the
        answer becomes DISK_ERROR and the leader retries after a heartbeat interval, by when
        the repairer has usually fixed it."""
        if resp is not None and resp.code == Code.SUCCESS and resp.type in (PushEntryType.APPEND,
                                                                            PushEntryType.COMPARE):
            last = resp.index + max(resp.count, 1) - 1 if resp.type == PushEntryType.APPEND else resp.index
            if self.repairer.damaged_up_to(last):
                resp.code = Code.DISK_ERROR
        return resp

    def _error(self, req: Any, code: int) -> Any:
        cls = RESPONSE_OF.get(type(req), AppendEntryResponse)
        member = self.member_state
        return cls(group=getattr(req, "group", member.group), local_id=member.self_id,
                   remote_id=getattr(req, "local_id", ""),
                   code=int(code), term=getattr(req, "term", -1), leader_id=member.leader_id)
