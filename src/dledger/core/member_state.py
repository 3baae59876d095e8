"""MemberState: who this node is, its role, term, vote, leader and indices.

Rules kept here:
- term and vote live in the store's term file and change only through ``store.persist_term``,
  which is durable before it returns: whoever answers a vote or a term change calls it first;
- the term never goes backwards; a vote is given at most once per term;
- roles change only by event (``on_event``): ``ROLE_TRANSITIONS`` maps (role, ``RoleEvent``)
  to the new role, and a pair it does not hold raises ``IllegalTransition`` (the test
  harness's forced roles are events of the table too); each change is recorded as a
  ``RoleChange`` carrying its event, each (term, role) once, in order, and logged (INFO,
  ``n1: FOLLOWER -> CANDIDATE in term 3 (election timeout)``);
- terms are incrementable: ``next_term`` refuses to pass 2**63-1 (peers cannot push a node
  near it: ``protocol.out_of_range``);
- ``leader_base_index`` is the log end when this leadership began (linearizable reads wait
  for a commit above it); the read lease is fenced for a term in which a leadership transfer
  started, or which this node leads again after its process restarted (``no_lease_term``);
- the committed index never goes backwards (leader: only in its own term; follower: only when
  not leader), and is handed to the store so that committed entries are never truncated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from dledger.core.membership import ConfigHistory, Configuration
from dledger.core.quorum import Majority
from dledger.core.transitions import TransitionTable
from dledger.errors import DLedgerError
from dledger.entry import MAX_TERM
from dledger.protocol import DLedgerResponseCode as Code, peers_text

if TYPE_CHECKING:
    from dledger.store import LogStore

log = logging.getLogger(__name__)


class Role(Enum):
    UNKNOWN = "UNKNOWN"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


class RoleEvent(Enum):
    """What made a role change: the key of ``ROLE_TRANSITIONS`` and the reason a
    ``RoleChange`` carries (its value is how logs and transcripts say it)."""

    #: the node starts (the first role it tells; no transition)
    START = "start"
    #: a follower heard no heartbeat nor push of its leader for ``max_heart_beat_leak`` intervals
    ELECTION_TIMEOUT = "election timeout"
    #: a leader heard no quorum of answers for an election timeout (check-quorum)
    QUORUM_LOST = "check-quorum lost"
    #: a heartbeat was answered INCONSISTENT_LEADER: the follower follows another leader
    INCONSISTENT_LEADER = "a follower follows another leader"
    #: a request or an answer carried a higher term (the node joins it as candidate)
    HIGHER_TERM_SEEN = "higher term seen"
    #: the leader's store failed a sync: nothing it writes is durable any more
    STORE_FAILED = "store failed"
    #: a leader stuck on a damaged entry steps aside (``core.damaged_tail``)
    STEP_ASIDE_DAMAGED_TAIL = "stepping aside: damaged entry"
    #: a leader whose committed configuration leaves it out (``core.membership``)
    REMOVED = "removed from the group"
    #: the transferee of a leadership transfer caught up and stands in the next term
    TAKE_LEADERSHIP = "taking leadership"
    #: a heartbeat of the candidate's term came from a leader
    LEADER_HEARD = "leader heard"
    #: a quorum accepted the candidate's vote request
    WON_VOTE = "vote won"
    #: the test harness's roles (elector disabled): lead, or follow the named leader
    FORCED_LEADER = "forced to lead"
    FORCED_FOLLOWER = "forced to follow"

    def __str__(self) -> str:
        return self.value


#: Every role transition, keyed by event (h11's ``EVENT_TRIGGERED_TRANSITIONS``):
#: ``MemberState.on_event`` takes the role this table gives, and a (role, event) pair not in
#: it raises ``IllegalTransition``. docs/architecture.md draws this table.
_FORCED = {RoleEvent.FORCED_LEADER: Role.LEADER, RoleEvent.FORCED_FOLLOWER: Role.FOLLOWER}
ROLE_TRANSITIONS: TransitionTable[Role, RoleEvent] = TransitionTable("role", {
    Role.CANDIDATE: {
        RoleEvent.WON_VOTE: Role.LEADER,
        RoleEvent.LEADER_HEARD: Role.FOLLOWER,
        RoleEvent.HIGHER_TERM_SEEN: Role.CANDIDATE,
        RoleEvent.TAKE_LEADERSHIP: Role.CANDIDATE,
        **_FORCED,
    },
    Role.FOLLOWER: {
        RoleEvent.ELECTION_TIMEOUT: Role.CANDIDATE,
        RoleEvent.HIGHER_TERM_SEEN: Role.CANDIDATE,
        RoleEvent.TAKE_LEADERSHIP: Role.CANDIDATE,
        **_FORCED,
    },
    Role.LEADER: {
        RoleEvent.QUORUM_LOST: Role.CANDIDATE,
        RoleEvent.INCONSISTENT_LEADER: Role.CANDIDATE,
        RoleEvent.HIGHER_TERM_SEEN: Role.CANDIDATE,
        RoleEvent.STORE_FAILED: Role.CANDIDATE,
        RoleEvent.STEP_ASIDE_DAMAGED_TAIL: Role.CANDIDATE,
        RoleEvent.REMOVED: Role.CANDIDATE,
        RoleEvent.TAKE_LEADERSHIP: Role.CANDIDATE,
        **_FORCED,
    },
})


@dataclass(slots=True, frozen=True)
class RoleChange:
    """A role transition, as told to role-change handlers: the role and term it is in, the
    leader it knows, and the event that caused it (``None`` only where a host builds one)."""

    term: int
    role: Role
    leader_id: str | None
    event: RoleEvent | None = None

    def __str__(self) -> str:
        why = f" ({self.event.value})" if self.event is not None else ""
        leader = f" leader={self.leader_id}" if self.role is Role.FOLLOWER else ""
        return f"{self.role.value} in term {self.term}{leader}{why}"


class MemberState:
    def __init__(self, config, store: "LogStore") -> None:
        self.config = config
        self.store = store
        self.group: str = config.group
        self.self_id: str = config.self_id
        #: every address this node knows: its own ``peers`` win over a configuration's (a member
        #: may reach another through a proxy or another name)
        #: the ``peers`` this node was started with (the bootstrap configuration of a new group)
        self.given_peers: dict[str, str] = dict(config.peer_map)
        #: (the config's own ``peer_map``, which the transport dials from: a member added later
        #: is dialled at the address its configuration entry gives)
        self.addresses: dict[str, str] = config.peer_map if config.peer_map else {}
        #: the configurations of the log (core.membership): the bootstrap one until the node's
        #: ``MembershipSync`` loads the store's (``set_history``)
        self.history = ConfigHistory(Configuration(dict(config.peer_map)) if config.peer_map else None)
        self.configuration: Configuration | None = None
        #: a newer committed configuration that leaves this node out, as a voter told it (-2: none)
        self.removed_in = -2
        self._views(self.history.latest)
        self.peers_live: dict[str, bool] = {}
        self.role = Role.CANDIDATE
        self.leader_id: str | None = None
        self.committed_index = min(store.committed_index, store.ledger_end_index)
        self.applied_index = store.ledger_before_begin_index
        self.known_max_term_in_group = -1
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        #: leader: the log end when this leadership began; reads need a commit index above it
        self.leader_base_index = -1
        #: a term in which this node must not trust its read lease (see ``lease_fenced``)
        self.no_lease_term = -1
        #: the term and vote this process found in the store when it started
        self.started_in = (store.current_term, store.vote_for)
        self.changes: list[RoleChange] = []
        self._last_told: tuple[int, Role] | None = None
        #: a higher term this node joined as candidate and has not campaigned in yet
        self._joined_term = -1
        #: the leader this node last followed or was, and its term (for the log lines)
        self._last_leader: tuple[str | None, int] = (None, -1)

    # -- membership ---------------------------------------------------------------------------
    def _views(self, config: Configuration | None) -> None:
        """The views every part asks, of ``config`` (None: this node knows no configuration yet:
        it joins, and knows only the addresses it was given)."""
        self.configuration = config
        if config is None:
            members = {k: v for k, v in self.addresses.items()}
            voters: list[str] = []
        else:
            for node_id, address in config.members.items():
                self.addresses.setdefault(node_id, address)
            members = {k: self.addresses.get(k, v) for k, v in config.members.items()}
            voters = list(config.voters)
        #: the members (voters and learners) with the addresses this node uses
        self.peer_map: dict[str, str] = members if config is not None else {}
        #: the voters: votes are asked of them
        self.peer_ids: list[str] = voters
        self.learner_ids: list[str] = list(config.learners) if config is not None else []
        #: whom this node sends heartbeats and pushes to (a node without a configuration: whom
        #: it asks for its term, every address it knows)
        self.remote_peer_ids: list[str] = [p for p in members if p != self.self_id]
        #: the members as vote and heartbeat requests carry them (``core.peers_check``): only a
        #: bootstrap configuration is compared (one from the log is the log's to decide)
        self.peers_text: str = peers_text(self.peer_map) if config is not None and config.index < 0 else ""
        #: the voters: every quorum question (votes, commit, check-quorum, lease) asks it
        self.majority = Majority(voters)

    def set_history(self, history: ConfigHistory) -> None:
        self.history = history
        self._views(history.latest)

    def configuration_changed(self) -> bool:
        """Take the history's latest configuration if it is not the one in force; True when it
        changed (logged)."""
        latest = self.history.latest
        if latest is self.configuration:
            return False
        before = self.configuration
        self._views(latest)
        if latest is None:
            log.info("%s: no configuration now", self.self_id)
        elif before is None or not latest.same_members(before):
            log.info("%s: configuration of entry %d: %s%s", self.self_id, latest.index, latest.describe(),
                     "" if latest.is_member(self.self_id) else " (this node is not a member)")
        return True

    @property
    def config_index(self) -> int:
        """The index of the entry that made the configuration in force (-1: bootstrap; -2: none)."""
        return self.configuration.index if self.configuration is not None else -2

    def removed(self, by: str | None, config_index: int) -> None:
        """``by`` refused this node's vote request: its committed configuration of entry
        ``config_index``, newer than this node's, leaves this node out. It stands for election no
        more until its own log holds a configuration at least that new (one that adds it back)."""
        if config_index > self.removed_in:
            self.removed_in = config_index
            log.warning("%s: %s says this node is not a member of the group's configuration of entry %d (it "
                        "was removed): it stands for election no more", self.self_id, by, config_index)

    def needed_until_committed(self) -> bool:
        """Whether this node, though not a voter of its newest configuration, was one of the
        configuration before, and the newest is not committed yet: it may still be needed to
        elect a leader that commits it (the Raft dissertation's removed server: it may have the
        only up-to-date log of the old configuration's members)."""
        config = self.configuration
        if config is None or config.index <= self.committed_index or config.is_voter(self.self_id):
            return False
        before = self.history.at(config.index - 1)
        return before is not None and before.is_voter(self.self_id)

    def knows_removed(self) -> bool:
        return self.removed_in > self.config_index

    def refuses_outsider(self, node_id: str | None, their_config_index: int) -> bool:
        """Whether a vote or heartbeat request from ``node_id`` is refused for its membership:
        it is not a member of this node's configuration, that configuration is committed (an
        uncommitted one may still be cut, and a leader it leaves out may be the one that cuts
        it), and the sender knows no newer one (which may have made it a member)."""
        config = self.configuration
        return (config is not None and node_id not in self.peer_map and their_config_index <= config.index
                and config.index <= self.committed_index)

    def is_voter(self, node_id: str | None = None) -> bool:
        config = self.configuration
        return config is not None and config.is_voter(self.self_id if node_id is None else node_id)

    # -- persistent state ---------------------------------------------------------------------
    @property
    def curr_term(self) -> int:
        return self.store.current_term

    @property
    def curr_vote_for(self) -> str | None:
        return self.store.vote_for

    def set_vote_for(self, candidate: str | None) -> None:
        self.store.persist_term(self.curr_term, candidate)

    def next_term(self) -> int:
        if self.role is not Role.CANDIDATE:
            raise DLedgerError(f"{self.self_id} is {self.role.value}, not CANDIDATE", Code.ILLEGAL_MEMBER_STATE)
        if self._joined_term == self.curr_term and self.curr_vote_for is None:
            # the higher term seen was joined (durably) when it was seen: campaign in it
            self._joined_term = -1
            return self.curr_term
        term = self.known_max_term_in_group if self.known_max_term_in_group > self.curr_term \
            else self.curr_term + 1
        if term > MAX_TERM:
            raise DLedgerError(f"{self.self_id}: term {self.curr_term} cannot be incremented (the largest "
                               f"term is {MAX_TERM})", Code.ILLEGAL_MEMBER_STATE)
        self.store.persist_term(term, None)
        return term

    def adopt_term(self, term: int) -> None:
        """Move to a larger term with no vote (durable first)."""
        if term > self.curr_term:
            self.store.persist_term(term, None)

    # -- log view -----------------------------------------------------------------------------
    @property
    def ledger_end_index(self) -> int:
        return self.store.ledger_end_index

    @property
    def ledger_end_term(self) -> int:
        return self.store.ledger_end_term

    # -- roles --------------------------------------------------------------------------------
    def is_peer_member(self, peer_id: str | None) -> bool:
        return peer_id is not None and peer_id in self.peer_map

    def tell_initial_role(self) -> None:
        """Record the role this member starts in (once, when the node is built)."""
        self._told(RoleEvent.START, self.role)

    def _told(self, event: RoleEvent, before: Role, why: str = "") -> None:
        key = (self.curr_term, self.role)
        if key != self._last_told:
            self._last_told = key
            change = RoleChange(self.curr_term, self.role, self.leader_id, event)
            self.changes.append(change)
            if event is RoleEvent.START:
                log.info("%s: %s", self.self_id, change)
                return
            if self.role is not Role.CANDIDATE and self.leader_id != self._last_leader[0]:
                # a leader change: which leader it follows now, and which it followed before
                was, in_term = self._last_leader
                if was is not None:
                    before_it = f"the leader was {was} in term {in_term}"
                    why = f"{why}; {before_it}" if why else before_it
                self._last_leader = (self.leader_id, self.curr_term)
            log.info("%s: %s -> %s%s", self.self_id, before.value, change, f": {why}" if why else "")

    def fence_lease(self) -> None:
        """A leadership transfer starts: the transferee may win the next term without the
        leader stickiness that makes the lease sound, even if no answer comes back. The
        lease is not trusted again in this term (READ_INDEX_READ still is); a new
        leadership, won in a later election, starts a new lease."""
        self.no_lease_term = self.curr_term

    def lease_fenced(self) -> bool:
        return self.no_lease_term == self.curr_term

    def is_taking_leadership(self) -> bool:
        """This node is the transferee of a leadership transfer in its current term."""
        return self.term_to_take_leadership == self.curr_term and self.term_to_take_leadership >= 0

    def on_event(self, event: RoleEvent, term: int, leader_id: str | None = None, *, why: str = "") -> Role:
        """``event`` happened in ``term``: take the role ``ROLE_TRANSITIONS`` gives for it
        (``IllegalTransition``, with nothing changed, when the table has none) and tell the
        change with its event (``why``: its details, for the log line only). ``leader_id``
        names the leader to follow (FOLLOWER only).

        - LEADER: ``term`` is the current term (its vote passed, or the harness forced it);
        - FOLLOWER: follows ``leader_id`` in the current ``term``;
        - CANDIDATE: stands (or stays) knowing ``term``; a higher term is joined at once,
          durably and with no vote, so that the change is told with the term it is in
          (``next_term`` then campaigns in it rather than above it)."""
        before = self.role
        role = ROLE_TRANSITIONS.next_state(before, event, self.self_id)
        if role is Role.LEADER:
            self._enter_leader(term)
        elif role is Role.FOLLOWER:
            self._enter_follower(term, leader_id)
        else:
            self._enter_candidate(term)
        self._told(event, before, why)
        return role

    def _enter_leader(self, term: int) -> None:
        assert term == self.curr_term, (term, self.curr_term)
        self.role = Role.LEADER
        self.leader_id = self.self_id
        self.peers_live.clear()
        self.leader_base_index = self.store.ledger_end_index
        if self.started_in == (term, self.self_id):
            # re-elected in the term it had already voted for itself in before this process
            # started: an earlier incarnation may have led this term and begun a leadership
            # transfer, whose transferee passes leader stickiness: no lease in this term
            self.no_lease_term = term

    def _enter_follower(self, term: int, leader_id: str | None) -> None:
        assert term == self.curr_term, (term, self.curr_term)
        assert leader_id is not None, "a follower follows a named leader"
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None

    def _enter_candidate(self, term: int) -> None:
        assert term >= self.curr_term, (term, self.curr_term)
        if term > self.curr_term:
            self.store.persist_term(term, None)
            self._joined_term = term
        self.known_max_term_in_group = max(self.known_max_term_in_group, term)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.transferee = None

    # -- indices ------------------------------------------------------------------------------
    def leader_update_committed_index(self, term: int, index: int) -> bool:
        if self.role is not Role.LEADER or term < self.curr_term or index <= self.committed_index:
            return False
        self.committed_index = index
        self.store.update_committed_index(index)
        return True

    def follower_update_committed_index(self, index: int) -> bool:
        index = min(index, self.store.ledger_end_index)
        if self.role is Role.LEADER or index <= self.committed_index:
            return False
        self.committed_index = index
        self.store.update_committed_index(index)
        return True

    def __repr__(self) -> str:
        return (f"MemberState({self.self_id} {self.role.value} term={self.curr_term} "
                f"leader={self.leader_id} end={self.ledger_end_index} commit={self.committed_index})")
