"""Votes: the candidate's rounds and the voter's rules (DLedger's LeaderElector, vote part).

The candidate:
- asks every peer (and itself) for a vote; the answers are tallied in a ``VoteTally`` and
  parsed into DLedger's ``ParseResult`` (``parse_vote_tally``, a pure function with a table
  test): a round that reaches no quorum of *valid* answers keeps the term (so an isolated
  node does not inflate its term), a round answered but lost moves to the next term after a
  random delay from the injected ``random.Random``, ``REJECT_TERM_NOT_READY`` answers lead
  to an immediate revote; a node that learnt of a higher term (it was deposed by an answer
  carrying it) asks in that term, not again in its old one;
- a round that cannot pass any more, or has passed, is decided at once without waiting for
  the missing answers (``Majority.vote_result``); ``REJECT_ALREADY_HAS_LEADER`` delays the
  next round by half to one heartbeat interval only;
- "taking leadership" (a transferee) uses the short vote delays;
- a candidate whose term was relearnt (``core.rejoin``, a vote for no member) from answers
  that showed an election of that term (a leader named, or a vote given) campaigns above it
  only after one election timeout: that leader may be alive, or about to win, and would be
  deposed by the higher term for nothing (its heartbeat makes the node a follower first).

The voter applies DLedger's rules in DLedger's order (log check before term check): ``admit``
judges the candidate, this node's recovery and the candidate's log; the term gate
(``core.term_gate``) judges the term (a lower one is refused; a higher one is joined first,
durably, and answered ``REJECT_TERM_NOT_READY``, unless leader stickiness refuses it); ``vote``
applies the rules of a candidate of this node's term. Every vote is made durable through
``store.persist_term`` (``MemberState.set_vote_for``) before the answer is built. A round
counts the higher term an answer carries as the gate found it (``VoteTally.higher_term``).

State: member state, config, rng, recovery (``core.rejoin``) and the round trips seen
(``core.round_trip``: how long a round waits). Its decisions are intents (``core.intents``)
returned to the node: vote requests to send (``Send``, with the round's tally, to which the
node hands back each answer, ``on_answer``) and ``Won(term)`` when a round passes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

from dledger.core import term_gate
from dledger.core.heartbeat import election_timeout_ms
from dledger.core.intents import NONE, Send, Won
from dledger.core.member_state import MemberState, Role, RoleEvent
from dledger.core.quorum import Majority, VoteOutcome
from dledger.core.rejoin import NO_MEMBER, Rejoin
from dledger.core.round_trip import RoundTrips
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, VoteRequest, VoteResponse, VoteResult

log = logging.getLogger(__name__)


class ParseResult(Enum):
    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


#: answers that let a round go on: a vote, or a voter that first has to catch up its term
_FAVOURABLE = (VoteResult.ACCEPT, VoteResult.REJECT_TERM_NOT_READY)


@dataclass(slots=True)
class VoteTally:
    """Answers to one vote round, counted as DLedger counts them."""

    term: int
    #: the round passes only with every member's vote (``VoteRequest.unanimous``)
    unanimous: bool = False
    #: voter -> whether its answer lets the round go on (ACCEPT or REJECT_TERM_NOT_READY)
    responded: dict[str, bool] = field(default_factory=dict)
    valid: int = 0
    #: voters that said they are recovering (those that answered REJECT_RECOVERING take no
    #: part: they are not counted as valid)
    recovering: int = 0
    accepted: int = 0
    not_ready: int = 0
    bigger_ledger: int = 0
    #: voters that voted for another candidate in this term already: they vote in it no more
    already_voted: int = 0
    already_has_leader: bool = False
    #: the highest term a voter said this candidate is behind on (``term_gate.higher_term``)
    higher_term: int | None = None
    #: the voter that said so (for the log line)
    higher_from: str | None = None
    #: voter -> its answer in words (``ACCEPT``, a rejection's name, ``no answer``): the log lines
    results: dict[str, str] = field(default_factory=dict)
    #: the voters that said they are recovering
    recovering_voters: set = field(default_factory=set)

    def votes_text(self) -> str:
        """Who voted for, who against (and why), who did not answer: ``for n0, n1; against n2
        (REJECT_ALREADY_VOTED); no answer from n3``."""
        yes = sorted(v for v, r in self.results.items() if r == "ACCEPT")
        silent = sorted(v for v, r in self.results.items() if r == "no answer")
        no = sorted((v, r) for v, r in self.results.items() if r not in ("ACCEPT", "no answer"))
        parts = [f"for {', '.join(yes) if yes else 'none'}"]
        if no:
            parts.append("against " + ", ".join(f"{v} ({r})" for v, r in no))
        if silent:
            parts.append("no answer from " + ", ".join(silent))
        return "; ".join(parts)

    def add(self, voter: str, resp: VoteResponse | None, higher: int | None = None) -> None:
        """Count ``voter``'s answer ``resp``; ``higher``: the term above this round's the term
        gate found in it (None: it claims none)."""
        if voter in self.responded:
            return          # a duplicated answer counts once
        result = VoteResult.UNKNOWN if resp is None else resp.vote_result
        self.responded[voter] = result in _FAVOURABLE
        self.results[voter] = _in_words(resp)
        if result == VoteResult.REJECT_RECOVERING or resp is not None and resp.recovering:
            self.recovering += 1
            self.recovering_voters.add(voter)
        if result not in (VoteResult.UNKNOWN, VoteResult.REJECT_RECOVERING):
            self.valid += 1
        if result == VoteResult.ACCEPT:
            self.accepted += 1
        elif result == VoteResult.REJECT_TERM_NOT_READY:
            self.not_ready += 1
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            self.bigger_ledger += 1
        elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
            self.already_has_leader = True
        elif result == VoteResult.REJECT_ALREADY_VOTED:
            self.already_voted += 1
        if higher is not None and (self.higher_term is None or higher > self.higher_term):
            self.higher_term = higher
            self.higher_from = voter

    def decided(self, majority: Majority) -> bool:
        """Someone still hears a leader, or the round has passed, or it could not pass even
        if every voter still missing agreed."""
        outcome = majority.unanimous_result(self.responded) if self.unanimous else majority.vote_result(self.responded)
        return self.already_has_leader or outcome is not VoteOutcome.PENDING


def _in_words(resp: VoteResponse | None) -> str:
    """A vote answer as the log lines say it."""
    if resp is None:
        return "no answer"
    if resp.code != Code.SUCCESS:
        return Code.of(resp.code).name
    try:
        return VoteResult(resp.vote_result).name
    except ValueError:
        return f"vote result {resp.vote_result}"


def parse_vote_tally(t: VoteTally, majority: Majority) -> ParseResult:
    """DLedger's parse of a finished round as a pure function (first matching rule wins).
    A unanimous round passes (or is revoted at once) only with every member."""
    is_quorum = majority.is_quorum
    enough = (lambda count: count >= len(majority)) if t.unanimous else is_quorum
    if t.higher_term is not None:
        return ParseResult.WAIT_TO_VOTE_NEXT
    if t.already_has_leader:
        return ParseResult.WAIT_TO_REVOTE
    if len(majority) and not is_quorum(len(majority) - t.already_voted):
        # too many voters gave their vote in this term to another: nobody can win it any more,
        # whoever else answers (with one voter down and another slow, waiting for a quorum of
        # answers would wait for ever: seed 20001 of the five-node membership swarm)
        return ParseResult.WAIT_TO_VOTE_NEXT
    if not is_quorum(t.valid):
        return ParseResult.WAIT_TO_REVOTE
    if not is_quorum(t.valid - t.bigger_ledger) or t.unanimous and t.bigger_ledger:
        return ParseResult.WAIT_TO_REVOTE       # (a unanimous round: one member is ahead of it)
    if enough(t.accepted):
        return ParseResult.PASSED
    if enough(t.accepted + t.not_ready):
        return ParseResult.REVOTE_IMMEDIATELY
    return ParseResult.WAIT_TO_VOTE_NEXT


class Voting:
    """The candidate's vote rounds and the voter's answers."""

    def __init__(self, member_state: MemberState, config, rng, *, now_ms: int, recovery: Rejoin,
                 round_trips: RoundTrips | None = None) -> None:
        self.member_state = member_state
        #: the slowest recent round trips: how long a round waits for its answers
        self.round_trips = round_trips
        self.recovery = recovery
        self.cfg = config
        self.rng = rng                          # the injected random.Random
        self.next_time_to_request_vote = now_ms + self.vote_delay()
        #: the next round takes a new term at once (this node learnt of a higher term)
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.round: VoteTally | None = None
        self.round_deadline = 0
        #: the last round found more than a minority recovering: ask for a unanimous vote
        self.unanimous_next = False
        #: when this candidate first found its term relearnt (see ``_hearing_out_relearnt_term``)
        self._relearnt_since: int | None = None
        #: the last round that finished (what ``core.waiting`` reports)
        self.last_tally: VoteTally | None = None
        #: why the next round is held (logged with it at INFO; None: a repeated round, DEBUG)
        self._why_next: str | None = "the node started"
        #: (term, votes) of the last lost round logged at INFO: the same again is DEBUG
        self._loss_logged: tuple | None = None

    # -- timing ----------------------------------------------------------------------------
    def vote_delay(self) -> int:
        """A random delay before the next round (one draw from the injected rng)."""
        c = self.cfg
        if self.member_state.is_taking_leadership():
            lo, hi = c.min_take_leadership_vote_interval_ms, c.max_take_leadership_vote_interval_ms
        else:
            lo, hi = c.min_vote_interval_ms, c.max_vote_interval_ms
        return lo + self.rng.randrange(hi - lo + 1)

    def deadline(self) -> int:
        return self.round_deadline if self.round is not None else self.next_time_to_request_vote

    # -- becoming a candidate, leaving candidacy --------------------------------------------
    def become_candidate(self, now: int, term: int, event: RoleEvent, why: str = "") -> None:
        """Step down (or stay) as candidate, knowing ``term``, because of ``event`` (``why``:
        its details, for the log line); the next vote after a random delay."""
        self.member_state.on_event(event, term, why=why)
        self._why_next = event.value
        self.round = None
        self.next_time_to_request_vote = now + self.vote_delay()

    def stand_aside(self, now: int) -> None:
        """A leader that cannot serve steps down and stands again only after the others had a
        chance: its followers notice the silence after an election timeout and run their rounds
        (each after a vote delay) before its own next round."""
        self.become_candidate(now, self.member_state.curr_term, RoleEvent.STEP_ASIDE_DAMAGED_TAIL)
        self.next_time_to_request_vote += 2 * election_timeout_ms(self.cfg) + self.cfg.max_vote_interval_ms

    def catch_up_term(self, now: int, term: int, event: RoleEvent, why: str = "") -> None:
        """A higher ``term`` was seen (or, ``TAKE_LEADERSHIP``, a transferee stands in it):
        become its candidate; the term is taken at once."""
        self.become_candidate(now, term, event, why)
        self.need_increase_term_immediately = True

    def probe_now(self, now: int) -> None:
        """Start the next round at once (in the current term: it moves no term)."""
        self.next_time_to_request_vote = now

    def follow(self, term: int, leader_id: str) -> None:
        """A leader of this term spoke: stop any round and follow it."""
        self.round = None
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.member_state.on_event(RoleEvent.LEADER_HEARD, term, leader_id, why=f"a heartbeat of {leader_id}")

    def on_role_change(self, change) -> None:
        if change.role is not Role.CANDIDATE:
            self.need_increase_term_immediately = False

    # -- the candidate ----------------------------------------------------------------------
    def maintain_forced(self) -> None:
        """Roles are forced (elector disabled), but a node still catches up a higher term it
        was told about."""
        if self.need_increase_term_immediately and self.member_state.role is Role.CANDIDATE:
            self.member_state.next_term()
            self.need_increase_term_immediately = False

    def round_ms(self) -> int:
        """How long a round waits for its answers: a heartbeat interval at least, one and a half
        times the slowest recent round trip, one election timeout at most."""
        floor = self.cfg.heart_beat_time_interval_ms
        if self.round_trips is None:
            return floor
        return self.round_trips.round_ms(floor, election_timeout_ms(self.cfg))

    def maintain(self, now: int) -> list | tuple:
        """The candidate's step: end a round that is due, or start the next one when it is time.
        Returns the intents (vote requests, ``Won``)."""
        member = self.member_state
        if self.round is not None:
            if now >= self.round_deadline:
                return self._finish_round(now)
            return NONE
        if now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return NONE
        if self.need_increase_term_immediately:
            member.next_term()                  # the term seen was joined already: no increment
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
            self.need_increase_term_immediately = False
            self.next_time_to_request_vote = now + self.vote_delay()
            return NONE
        recovery = self.recovery
        if not recovery.may_stand():
            # recovering with its term unknown, or a failed store: no candidacy
            self.next_time_to_request_vote = now + self.vote_delay()
            return NONE
        if member.curr_vote_for == NO_MEMBER and self._hearing_out_relearnt_term(now):
            self.next_time_to_request_vote = now + self.vote_delay()
            return NONE
        was = member.curr_term
        config = member.configuration
        if self.last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT or member.curr_vote_for == NO_MEMBER \
                or member.known_max_term_in_group > member.curr_term \
                or config is not None and config.made_in(member.curr_term) \
                or (recovery.recovering and member.started_in == (member.curr_term, member.self_id)):
            # (a relearnt term carries a vote for no member: campaign above it; and a node that
            # learnt of a higher term (a follower's answer deposed it) never asks again in its
            # old one: a leader of that term is deposed by the same answer again; and a suspect
            # node that had voted for itself in its term before it stopped may have led that term
            # and lost what it appended then (a power cut in page_cache mode): winning that term
            # again would give one index of that term two entries (seed 7300009); and a node that
            # holds a change of the members made in its term votes for nobody in it, itself
            # included (``vote``): it can only win the next one (seed 9200035))
            term = member.next_term()
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = member.curr_term
        # a round is unanimous when the last one found more than a minority recovering (a
        # recovering candidate's own vote counts only in such a round; in a plain round it
        # can still win with a quorum of the others' votes)
        unanimous = self.unanimous_next
        self._log_start(term, was, unanimous)
        tally = VoteTally(term, unanimous=unanimous)
        self.round = tally
        self.round_deadline = now + self.round_ms()
        transfer = member.is_taking_leadership()
        out: list = []
        for peer in member.peer_ids:
            req = VoteRequest(group=member.group, local_id=member.self_id, remote_id=peer, leader_id=member.self_id,
                              term=term, ledger_end_index=member.ledger_end_index,
                              ledger_end_term=member.ledger_end_term, leadership_transfer=transfer,
                              unanimous=unanimous, members=member.peers_text,
                              config_index=max(member.config_index, -1))
            if peer == member.self_id:
                # its own vote: the round's term is this node's, so only the voter's rules apply
                resp = self.admit(req, self_vote=True) or self.vote(req, self_vote=True)
                tally.add(peer, resp, term_gate.higher_term(resp, member.curr_term))
            else:
                out.append(Send(peer, req, tally))
        if self.round is tally and tally.decided(member.majority):
            out.extend(self._finish_round(now))
        return out

    def on_answer(self, now: int, voter: str | None, resp: VoteResponse | None, tally: VoteTally,
                  higher: int | None) -> tuple:
        """``voter``'s answer to a request of round ``tally`` (None: unanswered); ``higher``:
        the term above this node's it claims (``core.term_gate``)."""
        if self.round is not tally:
            return NONE
        if now > self.round_deadline:
            # a round counts only the answers that came within it (a process paused past its
            # deadline must not count an old vote: a voter that lost its term file relies on it)
            return self._finish_round(now)
        if resp is not None and resp.vote_result == VoteResult.REJECT_UNKNOWN_LEADER \
                and resp.config_index > self.member_state.config_index:
            self.member_state.removed(voter, resp.config_index)
        tally.add(voter, resp, higher)
        if tally.decided(self.member_state.majority):
            return self._finish_round(now)
        return NONE

    def _finish_round(self, now: int) -> tuple:
        """End the round: ``Won`` when it passed, else the next round's time (or a higher term
        joined)."""
        tally, self.round = self.round, None
        member = self.member_state
        if tally is None or member.role is not Role.CANDIDATE or member.curr_term != tally.term:
            return NONE
        self.last_tally = tally
        for voter in member.peer_ids:                 # (for the log lines: who had not answered)
            tally.results.setdefault(voter, "no answer")
        majority = member.majority
        result = parse_vote_tally(tally, majority)
        self.last_parse_result = result
        # more than a minority answered that they are recovering: no quorum of sound votes can
        # form, so the next round asks for every member's vote (docs/architecture.md)
        self.unanimous_next = tally.recovering > 0 and not majority.is_quorum(len(majority) - tally.recovering)
        if result is not ParseResult.PASSED and tally.recovering and not tally.already_has_leader \
                and tally.responded.get(member.self_id) is False \
                and member.curr_vote_for not in (None, member.self_id):
            # it voted for another member in this term, so a round in it can never pass (its own
            # vote is gone) and, ended early, never hears every recovering voter: with no
            # leader heard of and voters recovering, the next round goes to the next term
            # (else a group whose only sound voter is this one never elects: soak seed 100358;
            # an isolated node hears no one and keeps its term, as DLedger's revote does)
            result = self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
        elif result is not ParseResult.PASSED and tally.higher_term is None and not tally.already_has_leader \
                and not tally.unanimous and member.self_id in tally.recovering_voters \
                and not majority.is_quorum(len(majority) - tally.already_voted - 1):
            # a recovering candidate's own vote counts in no plain round, and the voters that
            # gave theirs to another in this term vote in it no more: with too few left, no round
            # of this term can pass for it, so the next goes to the next term (else a recovering
            # node holding the longest log never wins: the others, standing in each term it
            # reaches, have always voted for themselves there first; seed 1510600 of the swarm
            # with snapshots and membership changes)
            result = self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
        c = self.cfg
        if result is ParseResult.PASSED:
            return (Won(tally.term, tally.votes_text()),)
        if result is ParseResult.REVOTE_IMMEDIATELY:
            log.debug("%s: vote round in term %d: voters catch up their term; again at once (%s)",
                      member.self_id, tally.term, tally.votes_text())
            self.next_time_to_request_vote = now
            return NONE
        self._log_loss(tally, result)
        delay = self.vote_delay()
        if tally.higher_term is not None:
            member.on_event(RoleEvent.HIGHER_TERM_SEEN, tally.higher_term,
                            why=f"{tally.higher_from}'s vote answer in term {tally.higher_term}")
        elif tally.already_has_leader:
            # someone still hears a leader: probe again soon (a same-term round moves nothing)
            half = c.heart_beat_time_interval_ms // 2
            delay = half + self.rng.randrange(half + 1)
        elif majority.is_quorum(tally.valid) and not majority.is_quorum(tally.valid - tally.bigger_ledger) \
                or tally.unanimous and tally.bigger_ledger:
            delay += c.max_vote_interval_ms     # a more up to date member should win: let it
        self.next_time_to_request_vote = now + delay
        return NONE

    # -- the log lines ----------------------------------------------------------------------
    def _log_start(self, term: int, was: int, unanimous: bool) -> None:
        """An election starts (INFO): a new term, or the first round since this node became a
        candidate; a repeated round in the same term is DEBUG (``core.waiting`` says why it
        repeats)."""
        member = self.member_state
        why = self._why_next
        if term != was and why is None:
            why = f"the round in term {was} was lost"
        self._why_next = None
        if why is None:
            log.debug("%s: vote round in term %d again", member.self_id, term)
            return
        moved = f" (term {was} -> {term})" if term != was else " (its current term)"
        kind = ", unanimous: more than a minority of voters are recovering" if unanimous else ""
        log.info("%s: election started in term %d%s: %s%s", member.self_id, term, moved, why, kind)

    def _log_loss(self, tally: VoteTally, result: ParseResult) -> None:
        """A round ended without a win (INFO; the same outcome in the same term again: DEBUG)."""
        member = self.member_state
        votes = tally.votes_text()
        if tally.higher_term is not None:
            then = f"{tally.higher_from} is in the higher term {tally.higher_term}: joining it"
        elif tally.already_has_leader:
            then = "a voter still hears a leader"
        elif not member.majority.is_quorum(tally.valid):
            then = "too few answers to decide; again in this term"
        elif result is ParseResult.WAIT_TO_VOTE_NEXT:
            then = "again in the next term"
        else:
            then = "a more up-to-date member should win; again later"
        key = (tally.term, votes)
        level = logging.DEBUG if key == self._loss_logged else logging.INFO
        self._loss_logged = key
        log.log(level, "%s: election in term %d lost: %s; %s", member.self_id, tally.term, votes, then)

    def _hearing_out_relearnt_term(self, now: int) -> bool:
        """A relearnt term (``core.rejoin``: a vote for no member) whose answers showed an
        election of that term, won (a leader named) or under way (a vote given): a round above
        it would depose that leader or cut that election short (this node's answers would carry
        the higher term), so the node waits one election timeout from the first round it would
        have run, as a follower waits before it stands; the leader's heartbeat makes it a
        follower meanwhile. With no election seen it campaigns at once."""
        if not self.recovery.saw_election_in(self.member_state.curr_term):
            return False
        if self._relearnt_since is None:
            self._relearnt_since = now
        return now - self._relearnt_since < election_timeout_ms(self.cfg)

    # -- the voter --------------------------------------------------------------------------
    def answer(self, req: VoteRequest, result: VoteResult, term: int | None = None) -> VoteResponse:
        """The answer to ``req`` with ``result``, carrying ``term`` (default: this node's)."""
        member = self.member_state
        return VoteResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                            leader_id=req.leader_id, term=member.curr_term if term is None else term,
                            vote_result=result, recovering=self.recovery.recovering)

    def admit(self, req: VoteRequest, self_vote: bool = False) -> VoteResponse | None:
        """DLedger's voter judges the candidate, this node's recovery and the candidate's log
        before its term (``core.term_gate``): the answer when one of them refuses, else None.
        Nothing changes here."""
        member = self.member_state
        candidate = req.leader_id
        if member.configuration is None:
            # no configuration yet: a new, wiped or joining store (recovering) votes in no plain
            # round (a unanimous one is sound whoever the voters are: every other voter's yes
            # covers what this empty log cannot); a node with a log whose entry that made it a
            # member is still ahead of it votes as any voter does (Raft: a vote never needs the
            # voter's own configuration; where it counts is the candidate's to say)
            if not req.unanimous and self.recovery.recovering:
                return self.answer(req, VoteResult.REJECT_RECOVERING)
        elif member.refuses_outsider(candidate, req.config_index):
            # not a member of this node's committed configuration, and the candidate knows no newer
            # one (a removed node that did not learn it): refused, naming that configuration's
            # entry (the candidate stands no more); any other candidate (one an uncommitted change
            # left out, or one a newer change made a voter) is judged on its log
            resp = self.answer(req, VoteResult.REJECT_UNKNOWN_LEADER)
            resp.config_index = member.config_index
            return resp
        if not self_vote and candidate == member.self_id:
            return self.answer(req, VoteResult.REJECT_UNEXPECTED_LEADER)
        recovery = self.recovery
        if recovery.failed:
            resp = self.answer(req, VoteResult.UNKNOWN)             # a failed store promises nothing
            resp.code = Code.DISK_ERROR
            return resp
        if not recovery.may_vote(req.unanimous):
            return self.answer(req, VoteResult.REJECT_RECOVERING)     # persists nothing, joins no term
        if req.ledger_end_term < member.ledger_end_term:
            return self.answer(req, VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == member.ledger_end_term and req.ledger_end_index < member.ledger_end_index:
            return self.answer(req, VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        return None

    def vote(self, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        """The voter's rules for a candidate of this node's term (admitted, and passed by the
        term gate): at most one vote per term, made durable through ``store.persist_term``
        (``MemberState.set_vote_for``) before the answer is built."""
        member = self.member_state
        candidate = req.leader_id
        vote = member.curr_vote_for
        if vote is not None and vote != candidate:
            return self.answer(req, VoteResult.REJECT_ALREADY_HAS_LEADER if member.leader_id is not None
                               else VoteResult.REJECT_ALREADY_VOTED)
        config = member.configuration
        if config is not None and config.made_in(member.curr_term):   # (the round's term)
            # the members changed in the round's term: its leader (which made the change) was
            # elected by a quorum of the configuration it held then, and after two changes a
            # quorum of today's need not meet that one: no second leader of the term, whoever
            # asks, even a candidate this node voted for before (it lost then, and today's smaller
            # quorum would count that vote again: seeds 20092 and 9000146); a node that made or
            # holds the change refuses, and every quorum of the next configuration holds one
            return self.answer(req, VoteResult.REJECT_ALREADY_HAS_LEADER if member.leader_id is not None
                               else VoteResult.REJECT_ALREADY_VOTED)
        if term_gate.below(req.term, member.ledger_end_term):
            return self.answer(req, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, member.ledger_end_term)
        if not self_vote and member.is_taking_leadership() and req.ledger_end_term == member.ledger_end_term \
                and member.ledger_end_index >= req.ledger_end_index:
            return self.answer(req, VoteResult.REJECT_TAKING_LEADERSHIP)
        try:
            member.set_vote_for(candidate)          # durable before the answer is built
        except DLedgerError as exc:
            log.error("%s: cannot persist the vote for %s in term %d: %s", member.self_id, candidate, req.term, exc)
            resp = self.answer(req, VoteResult.UNKNOWN)
            resp.code = exc.code
            return resp
        return self.answer(req, VoteResult.ACCEPT)
