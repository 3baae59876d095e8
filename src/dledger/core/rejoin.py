"""Rejoin: protocol-aware recovery of a member that may have lost what it promised.

A store reports ``suspect`` (``dledger.store.suspect``) when this replica may have lost
entries it acknowledged (``UNCLEAN_SHUTDOWN`` in ``page_cache`` mode, ``LOST_TAIL``), its whole
store (``FRESH``: a new or wiped directory, or a memory store) or the term and vote it had
(``TERM_LOST``). Until it has earned its place back (docs/architecture.md, "Protocol-aware
recovery"):

1. it votes in no round but a ``unanimous`` one, and only once its term is known
   (``may_vote``); it answers REJECT_RECOVERING, persists nothing and joins no term. Its vote
   answers say ``recovering`` in either case: a candidate that hears more than a minority
   recovering asks for a unanimous round next (the round passes only with every member);
2. it stands for election only once its term is known (``may_stand``); its own vote counts
   only in a unanimous round, so it wins a plain round only with a quorum of the others'
   votes, each given under the election restriction (then its log holds every committed
   entry, as any Raft leader's);
3. every push and heartbeat answer carries ``recovering=True`` (``recovering``), so that the
   leader counts its water mark toward no commit;
4. ``TERM_LOST`` and ``FRESH``: it relearns its term from the others (``maintain`` sends
   ``MetadataRequest``s) before it answers any leader (heartbeats and pushes are answered
   TERM_NOT_READY meanwhile). Done when every other member answered, or when ``n - q + 1``
   others (q: the quorum size) answered queries sent at least one election timeout after this
   process started (by then any vote round that could still count a vote of its earlier life
   has ended: a round counts only answers that come within it). Any term in which its vote
   helped elect someone was reached by a quorum, which those answers intersect, so the
   largest term answered, M, is at least that term; it persists M with a vote for no member
   (``NO_MEMBER``) before anything else, and can vote again only above M. Its own log's last
   term counts too. A new cluster (every answer judged says term 0, no vote, an empty log, and
   so does this node: no leader was ever elected, since its quorum would meet the answerers)
   persists nothing and a ``FRESH`` node clears at once: the first election stays in term 0;
5. it clears the flag, durably and before any answer without ``recovering``, when
   (``on_push_success``) as the follower of the leader of its current term it has verified
   that leader's log up to the commit index the leader sent *and* up to an entry of the
   leader's term, in a push that names this process's ``incarnation``: entries past the
   leader's log end at its election are of its term, so the verified prefix holds every
   entry committed before this term (leader completeness), and the commit index covers what
   this leader committed, its stale water marks of this node included, because the leader
   names the incarnation only in pushes sent after it heard it with ``recovering`` and forgot
   those water marks. A push without it may have left before (a delayed or replayed frame,
   or one sent before the leader heard of the restart): its commit index can lag an entry
   this leader committed with an acknowledgement this node gave and then lost (swarm seed
   90058). A leader appends a no-op when a follower recovers and its log holds no entry of
   its term (``entry_pusher``). ``FRESH`` also clears at once when every other member
   answered with an empty log (nothing was ever written, so nothing can be lost); and a
   recovering candidate that wins an election clears (``on_won_election``).

``TERM_LOST`` also waits for step 5: the store keeps the first reason only, and a lost term
file may hide an unclean shutdown.

A failed store (``store.failed``: a sync failed, nothing written since is durable) makes the
node stand for nothing and vote for no one (``failed``; the elector also steps a leader down).

State: member state, store, config. ``maintain`` returns the metadata queries to send
(``Send`` intents, ``core.intents``); the node hands each answer back to ``on_answer``. The
other components consult this state (``may_vote``, ``may_stand``, ``may_follow``,
``recovering``, ``incarnation``); the entry handler tells it of a push answered SUCCESS
(``on_push_success``), the elector of a won election.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dledger.core.heartbeat import election_timeout_ms
from dledger.core.intents import NONE, Send
from dledger.core.member_state import MemberState, Role
from dledger.core.quorum import quorum_size
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, MetadataRequest, MetadataResponse
from dledger.store.suspect import SuspectReason

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)

#: the vote recorded with a relearnt term: no member has this id (member ids contain no "-")
NO_MEMBER = "no-member"

_TERM_LOST = (SuspectReason.TERM_LOST, SuspectReason.FRESH)


class Rejoin:
    def __init__(self, member_state: MemberState, store: "LogStore", config, *, now_ms: int) -> None:
        self.member_state = member_state
        self.store = store
        self.cfg = config
        self.reason: SuspectReason | None = store.suspect
        #: the node's ``MembershipSync`` (a brand-new group takes its bootstrap configuration)
        self.membership = None
        #: this process's incarnation, sent with every ``recovering`` answer (the node sets it
        #: to its first request id, drawn at random per process); 0: not yet known
        self.incarnation = 0
        #: whether this node knows a term at least as high as any it may have voted in
        self.term_known = self.reason not in _TERM_LOST
        #: peer -> (its answer, whether the query was sent after ``settled_ms``)
        self.answers: dict[str, tuple[MetadataResponse, bool]] = {}
        #: queries sent from then on count toward a partial set of answers (see the docstring)
        self.settled_ms = now_ms + election_timeout_ms(config)
        self.next_query_ms = now_ms
        if self.reason is not None:
            log.info("%s: store is suspect (%s): recovering", member_state.self_id, self.reason.value)
        if self.reason is SuspectReason.FRESH and getattr(config, "bootstrap", False) \
                and store.ledger_end_index < 0 and member_state.curr_term == 0:
            # the operator says this is a new cluster: an empty store never voted nor wrote
            self.term_known = True
            self._clear("bootstrap: a new cluster, as configured")

    # =====================================================================================
    # what the other components ask
    # =====================================================================================
    @property
    def recovering(self) -> bool:
        return self.store.suspect is not None

    @property
    def failed(self) -> bool:
        return getattr(self.store, "failed", None) is not None

    def may_stand(self) -> bool:
        """Whether this node may run a vote round (a voter of its configuration only: a learner,
        a removed node and one that knows no configuration yet never stand)."""
        member = self.member_state
        return not self.failed and (self.term_known or not self.recovering) \
            and (member.is_voter() or member.needed_until_committed()) and not member.knows_removed()

    def may_vote(self, unanimous: bool) -> bool:
        """Whether this node may grant a vote in a round that is ``unanimous`` or not."""
        if self.failed:
            return False
        return not self.recovering or (unanimous and self.term_known)

    def may_follow(self) -> bool:
        """Whether this node may answer a leader (not while it relearns its term)."""
        return self.term_known or not self.recovering

    def saw_election_in(self, term: int) -> bool:
        """Whether an answer this node relearnt its term from showed an election of ``term``
        under way or won: it named a leader of ``term``, or a vote its sender gave in it."""
        return any(r.term == term and (r.leader_id is not None or r.vote_for not in (None, NO_MEMBER))
                   for r, _late in self.answers.values())

    # =====================================================================================
    # relearning the term
    # =====================================================================================
    def _asking(self) -> bool:
        """Whether queries are still due: the term is unknown, or (``FRESH``) not every other
        member answered yet (if all their logs are empty, the flag clears without a leader)."""
        if not self.recovering:
            return False
        return not self.term_known or (self.reason is SuspectReason.FRESH
                                       and len(self.answers) < len(self.member_state.remote_peer_ids))

    def next_deadline(self) -> int | None:
        return self.next_query_ms if self._asking() else None

    def maintain(self, now: int) -> list[Send] | tuple:
        """Ask the others for their term and log when queries are due; returns them."""
        if not self.term_known and not self.recovering:     # cleared by the test harness
            self.term_known = True
        if now < self.next_query_ms or not self._asking():
            return NONE
        self.next_query_ms = now + self.cfg.heart_beat_time_interval_ms
        member = self.member_state
        settled = now >= self.settled_ms
        sends = []
        for peer in member.remote_peer_ids:
            known = self.answers.get(peer)
            if known is not None and (known[1] or not settled):
                continue
            req = MetadataRequest(group=member.group, local_id=member.self_id, remote_id=peer)
            sends.append(Send(peer, req, settled))      # (the answer counts as late if so)
        if not member.remote_peer_ids:
            self._relearnt()
        return sends

    def on_answer(self, now: int, peer: str | None, resp: MetadataResponse | None, late: bool) -> None:
        """``peer``'s answer to a query (None: unanswered); ``late``: sent after ``settled_ms``."""
        if resp is None or peer is None or resp.code != Code.SUCCESS or not self._asking():
            return
        known = self.answers.get(peer)
        if known is None or late and not known[1]:
            self.answers[peer] = (resp, late)
        others = len(self.member_state.remote_peer_ids)
        if self.term_known:
            if len(self.answers) >= others and all(r.ledger_end_index < 0 for r, _l in self.answers.values()):
                self._new_group("every other member's log is empty")
                self._clear("every other member's log is empty")
            return
        n = others + 1
        enough = n - quorum_size(n) + 1
        if len(self.answers) >= others or sum(1 for _r, late_ in self.answers.values() if late_) >= enough:
            self._relearnt()

    def _relearnt(self) -> None:
        member, store = self.member_state, self.store
        answers = [r for r, _late in self.answers.values()]
        everyone = len(answers) >= len(member.remote_peer_ids)
        # with some member silent, judge by the answers given after the wait only
        judged = answers if everyone else [r for r, late in self.answers.values() if late]
        empty = everyone and all(r.ledger_end_index < 0 for r in answers)
        # a new cluster: no answerer ever voted or wrote, so no leader was ever elected (its
        # quorum would meet the answerers) and no vote of this node can count anywhere
        pristine = (store.ledger_end_index < 0 and member.curr_term == 0 and member.curr_vote_for is None
                    and all(r.term == 0 and r.vote_for is None and r.ledger_end_index < 0 for r in judged))
        top = max([r.term for r in answers] + [store.ledger_end_term, 0])
        try:
            if not pristine and member.curr_term <= top:
                # durable before this node votes: it can vote again only above ``top``
                store.persist_term(top, NO_MEMBER)
        except DLedgerError as exc:
            log.error("%s: cannot persist the relearnt term %d: %s", member.self_id, top, exc)
            return
        self.term_known = True
        log.info("%s: relearnt its term from %d member(s): term %d%s", member.self_id, len(answers),
                 member.curr_term, " (a new cluster)" if pristine else "")
        if self.reason is SuspectReason.FRESH and (empty or pristine):
            why = "a new cluster" if pristine else "every other member's log is empty"
            self._new_group(why)
            self._clear(why)

    def _new_group(self, why: str) -> None:
        """Every other member is as new as this node: the group is new, and its configuration is
        the bootstrap one (``core.membership_sync``)."""
        if self.membership is not None:
            self.membership.adopt_bootstrap(why)

    # =====================================================================================
    # clearing
    # =====================================================================================
    def on_push_success(self, term: int, commit_index: int, matched_term: int, matched_index: int,
                        incarnation: int = 0) -> None:
        """A push of the leader of ``term`` naming ``incarnation`` was answered SUCCESS; this
        node verified its log against that leader up to ``matched_index`` (in ``matched_term``)."""
        if not self.term_known or not self.recovering:
            return
        if incarnation != self.incarnation or incarnation == 0:
            return          # the push may predate the leader forgetting this node's water marks
        member = self.member_state
        if member.role is not Role.FOLLOWER or term != member.curr_term or matched_term != term:
            return
        if matched_index < 0 or matched_index < commit_index:
            return
        try:
            if self.store.get_entry_term(matched_index) != term:
                return
        except DLedgerError:
            return
        self._clear(f"caught up from leader {member.leader_id} of term {term} to index {matched_index}")

    def on_won_election(self) -> None:
        """This node won an election: its log is at least as up to date as those of a quorum
        of sound voters (or, in a unanimous round, of every member)."""
        if self.recovering:
            self._clear(f"won a unanimous election in term {self.member_state.curr_term}")

    def force_clear(self) -> None:
        """Test harness only (forced roles): recovery is not modelled."""
        if self.recovering:
            self._clear("roles are forced")
        self.term_known = True

    def _clear(self, why: str) -> None:
        try:
            self.store.clear_suspect()          # durable before any answer without ``recovering``
        except (DLedgerError, OSError) as exc:
            log.error("%s: cannot clear the suspect state: %s", self.member_state.self_id, exc)
            return
        log.info("%s: recovered (%s): %s", self.member_state.self_id,
                 self.reason.value if self.reason is not None else "-", why)
