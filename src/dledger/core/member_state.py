"""MemberState (SPEC §3): who this node is, its role, term, vote, leader and indices.

Rules kept here:
- term and vote live in the store's term file and change only through ``store.persist_term``,
  which is durable before it returns: whoever answers a vote or a term change calls it first;
- the term never goes backwards; a vote is given at most once per term;
- role transitions are recorded as ``RoleChange`` events, each (term, role) once, in order;
- the committed index never goes backwards (leader: only in its own term; follower: only when
  not leader), and is handed to the store so that committed entries are never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dledger.core.quorum import is_quorum
from dledger.errors import DLedgerError

ILLEGAL_MEMBER_STATE = 504


class Role(Enum):
    UNKNOWN = "UNKNOWN"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


#: Every role transition and what causes it (docs/architecture-core.md draws this table).
ROLE_TRANSITIONS: tuple[tuple[Role, Role, str], ...] = (
    (Role.CANDIDATE, Role.LEADER, "a quorum accepts its vote request"),
    (Role.CANDIDATE, Role.FOLLOWER, "heartbeat of its term from a leader"),
    (Role.CANDIDATE, Role.CANDIDATE, "round lost or higher term seen (next term)"),
    (Role.FOLLOWER, Role.CANDIDATE, "no heartbeat or push for leak x interval, higher term, or taking leadership"),
    (Role.LEADER, Role.CANDIDATE, "no quorum for leak x interval (check-quorum) or higher term seen"),
)


@dataclass(slots=True, frozen=True)
class RoleChange:
    """A role transition, as told to role-change handlers."""

    term: int
    role: Role
    leader_id: str | None


class MemberState:
    def __init__(self, config, store) -> None:
        self.config = config
        self.store = store
        self.group: str = config.group
        self.self_id: str = config.self_id
        self.peer_map: dict[str, str] = dict(config.peer_map)
        self.peer_ids: list[str] = list(self.peer_map)
        self.remote_peer_ids: list[str] = [p for p in self.peer_ids if p != self.self_id]
        self.peers_live: dict[str, bool] = {}
        self.role = Role.CANDIDATE
        self.leader_id: str | None = None
        self.committed_index = min(store.committed_index, store.ledger_end_index)
        self.applied_index = store.ledger_before_begin_index
        self.known_max_term_in_group = -1
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        self.changes: list[RoleChange] = []
        self._last_told: tuple[int, Role] | None = None

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
            raise DLedgerError(f"{self.self_id} is {self.role.value}, not CANDIDATE", ILLEGAL_MEMBER_STATE)
        term = self.known_max_term_in_group if self.known_max_term_in_group > self.curr_term \
            else self.curr_term + 1
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
    def quorum_size(self) -> int:
        return len(self.peer_ids) // 2 + 1

    def is_quorum(self, count: int) -> bool:
        return is_quorum(count, len(self.peer_ids))

    def is_peer_member(self, peer_id: str | None) -> bool:
        return peer_id is not None and peer_id in self.peer_map

    def _told(self) -> None:
        key = (self.curr_term, self.role)
        if key != self._last_told:
            self._last_told = key
            self.changes.append(RoleChange(self.curr_term, self.role, self.leader_id))

    def change_to_leader(self, term: int) -> None:
        assert term == self.curr_term, (term, self.curr_term)
        self.role = Role.LEADER
        self.leader_id = self.self_id
        self.peers_live.clear()
        self._told()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        assert term == self.curr_term, (term, self.curr_term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None
        self._told()

    def change_to_candidate(self, term: int) -> None:
        assert term >= self.curr_term, (term, self.curr_term)
        self.known_max_term_in_group = max(self.known_max_term_in_group, term)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.transferee = None
        self._told()

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
