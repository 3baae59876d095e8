"""Membership changes on the leader: add a learner, promote it, remove a member.

``Node.change_membership(now, token, op, node_id, address)`` (a mixin of ``Node``, as
``core.step``) plans the change (``plan_change``) and appends the new configuration as a
configuration entry; ``token`` completes with a ``MembershipResponse`` once the entry commits
(SUCCESS with its index and the new members), or with the refusal. The rules, as etcd-raft's
single-server changes with learners:

- only the leader changes membership (NOT_LEADER, naming the leader it knows), not during a
  leadership transfer (LEADER_TRANSFERRING);
- **one at a time**: a change is refused while the configuration entry before it is not
  committed (MEMBERSHIP_CHANGE_PENDING); and it waits until the leader has committed an entry
  of its own term (a new leader may hold an uncommitted change of an earlier term, which its
  first commit settles): the leader appends a no-op and the change is made once it commits
  (LEADER_NOT_READY after ``max_wait_ack_time_ms`` without, or NOT_LEADER if the leadership
  ends first; one change waits at a time);
- ``add_learner``: a new id (UNEXPECTED_MEMBER when it is a member already) with an address;
- ``promote``: a learner that answered the leader, is not recovering (a store that may have
  lost what it acknowledged, not yet caught up by a leader, would vote for nothing) and is within
  ``learner_max_lag_entries`` of the leader's log end (FALL_BEHIND_TOO_MUCH otherwise: promote
  it once it has caught up);
- ``remove``: a member; removing the leader hands leadership to the most caught-up live voter
  first (the answer is LEADER_TRANSFERRING, naming it: ask the new leader again), and a group
  keeps at least one voter.

Every refusal carries a message that says what to do. Nothing changes on a refusal.
"""

from __future__ import annotations

import logging
from typing import Any

from dledger.core.member_state import Role
from dledger.core.membership import Configuration, MembershipError
from dledger.entry import MAGIC_CONFIG_CHANGE, MAGIC_NOOP
from dledger.protocol import (AppendEntryResponse, DLedgerResponseCode as Code, LeadershipTransferRequest,
                              MembershipResponse)

log = logging.getLogger(__name__)

OPS = ("add_learner", "promote", "remove")


class ChangeRefused(Exception):
    def __init__(self, code: int, message: str, transfer_to: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        #: removing the leader: the voter leadership goes to first
        self.transfer_to = transfer_to


class _Change:
    """A token standing for a membership change waiting for its entry to commit."""

    __slots__ = ("token", "config")

    def __init__(self, token: Any, config: Configuration) -> None:
        self.token, self.config = token, config


def plan_change(member, store, cfg, op: str, node_id: str, address: str, match_of, read_safe: bool,
                progress_of=lambda _p: None) -> Configuration:
    """The configuration ``op`` makes of the one in force, or ``ChangeRefused``.
    ``match_of(id)``: a member's water mark; ``progress_of(id)``: the leader's dispatcher state
    of it (a ``FollowerProgress``, None when it has none)."""
    if op not in OPS:
        raise ChangeRefused(Code.UNEXPECTED_ARGUMENT, f"unknown membership operation {op!r} (one of {', '.join(OPS)})")
    if member.role is not Role.LEADER:
        where = f"; the leader is {member.leader_id}" if member.leader_id else "; no leader is known"
        raise ChangeRefused(Code.NOT_LEADER, f"{member.self_id} is not the leader{where}")
    if member.transferee is not None:
        raise ChangeRefused(Code.LEADER_TRANSFERRING, f"leadership is moving to {member.transferee}; ask again")
    config = member.configuration
    if member.history.uncommitted(member.committed_index):
        raise ChangeRefused(Code.MEMBERSHIP_CHANGE_PENDING,
                            f"the change of entry {config.index} is not committed yet; changes go one at a time")
    if not read_safe:
        raise ChangeRefused(Code.LEADER_NOT_READY,
                            f"leader {member.self_id} has not committed an entry of its term {member.curr_term} yet; "
                            f"ask again")
    if not node_id:
        raise ChangeRefused(Code.UNEXPECTED_ARGUMENT, "a membership change names a member id")
    try:
        if op == "add_learner":
            if not address or ":" not in address:
                raise ChangeRefused(Code.UNEXPECTED_ARGUMENT, f"adding {node_id} needs its address as host:port, "
                                                             f"got {address!r}")
            if config.is_member(node_id):
                raise ChangeRefused(Code.UNEXPECTED_MEMBER, f"{node_id} is already a member ({config.describe()})")
            return config.with_learner(node_id, address)
        if op == "promote":
            if config.is_learner(node_id):
                lag = store.ledger_end_index - match_of(node_id)
                pr = progress_of(node_id)
                if pr is None or pr.recovering or pr.match < min(0, store.ledger_end_index):
                    # it never answered, or answered as recovering and not caught up yet: as
                    # a voter it would vote for nothing until a leader caught it up
                    raise ChangeRefused(Code.FALL_BEHIND_TOO_MUCH,
                                        f"learner {node_id} has not caught up with the leader yet (it has "
                                        f"{'not answered' if pr is None or pr.match < 0 else 'not verified the log'}"
                                        f"); promote it once it has")
                if lag > cfg.learner_max_lag_entries:
                    raise ChangeRefused(Code.FALL_BEHIND_TOO_MUCH,
                                        f"learner {node_id} is {lag} entries behind the leader (at most "
                                        f"{cfg.learner_max_lag_entries} to be promoted); promote it once it caught up")
            return config.promoted(node_id)
        if not config.is_member(node_id):
            raise ChangeRefused(Code.UNKNOWN_MEMBER, f"{node_id} is not a member ({config.describe()})")
        if node_id == member.self_id:
            best = max((p for p in config.voters if p != member.self_id and member.peers_live.get(p)),
                       key=match_of, default=None)
            if best is None:
                raise ChangeRefused(Code.UNEXPECTED_ARGUMENT,
                                    f"{node_id} is the leader and no other voter is reachable to take over")
            raise ChangeRefused(Code.LEADER_TRANSFERRING,
                                f"{node_id} is the leader: leadership moves to {best} first; ask {best} again",
                                transfer_to=best)
        return config.without(node_id)
    except MembershipError as exc:
        raise ChangeRefused(Code.UNEXPECTED_ARGUMENT, str(exc)) from None


class Reconfiguring:
    """``Node.change_membership`` and the answers of its changes (a mixin of ``Node``)."""

    #: a change waiting for this leader's first commit: (token, op, node id, address, deadline)
    _parked_change: tuple | None = None

    def change_membership(self, now_ms: int, token: Any, op: str, node_id: str, address: str = "") -> None:
        now = self._clock(now_ms)
        self._change_membership(now, token, op, node_id, address)
        self._after(now)

    def _change_membership(self, now: int, token: Any, op: str, node_id: str, address: str,
                           park: bool = True) -> None:
        member = self.member_state
        try:
            config = plan_change(member, self.store, self.config, op, node_id, address, self.pusher.match_index,
                                 member.role is Role.LEADER and self._read_safe(), self.pusher.progress.get)
        except ChangeRefused as refused:
            if refused.code == Code.LEADER_NOT_READY and park and self._parked_change is None:
                # the change is made once this leader's first entry of its term commits
                self._parked_change = (token, op, node_id, address, now + self.config.max_wait_ack_time_ms)
                self._apply(now, self.pusher.propose(now, [(None, [], MAGIC_NOOP)]))
                return
            if refused.transfer_to is not None:
                req = LeadershipTransferRequest(group=member.group, local_id=member.self_id,
                                                remote_id=member.self_id, term=member.curr_term,
                                                transfer_id=member.self_id, transferee_id=refused.transfer_to)
                _resp, intents = self.elector.transfer.start(now, req, None,
                                                             self.pusher.match_index(refused.transfer_to))
                self._apply(now, intents)
            log.info("%s: membership change %s %s refused: %s", member.self_id, op, node_id, refused.message)
            self.complete(token, self._membership_answer(refused.code, -1, member.configuration, refused.message))
            return
        log.info("%s: membership change %s %s: appending %s", member.self_id, op, node_id, config.describe())
        self._apply(now, self.pusher.propose(now, [(_Change(token, config), [config.encode()], MAGIC_CONFIG_CHANGE)]))

    def _retry_parked_change(self, now: int) -> None:
        """The change waiting for this leader's first commit: made now if it committed, refused if
        the leadership ended or the wait is over."""
        token, op, node_id, address, deadline = self._parked_change
        member = self.member_state
        if member.role is Role.LEADER and not self._read_safe() and now < deadline:
            return
        self._parked_change = None
        self._change_membership(now, token, op, node_id, address, park=False)

    def _drop_parked_change(self, code: int) -> None:
        if self._parked_change is not None:
            token = self._parked_change[0]
            self._parked_change = None
            self.complete(token, self._membership_answer(code, -1, self.member_state.configuration,
                                                         "the node stopped"))

    def _membership_answer(self, code: int, index: int, config: Configuration | None,
                           message: str = "") -> MembershipResponse:
        member = self.member_state
        return MembershipResponse(group=member.group, local_id=member.self_id, code=int(code),
                                  term=member.curr_term, leader_id=member.leader_id, index=index, message=message,
                                  voters=dict(config.voters) if config is not None else {},
                                  learners=dict(config.learners) if config is not None else {})

    def _change_done(self, change: _Change, response: Any) -> tuple[Any, MembershipResponse]:
        """What a change's token completes with, from the append's ``response``."""
        if isinstance(response, AppendEntryResponse) and response.code == Code.SUCCESS:
            return change.token, self._membership_answer(Code.SUCCESS, response.index, change.config)
        code = getattr(response, "code", Code.INTERNAL_ERROR)
        try:
            text = Code(code).name
        except ValueError:
            text = str(code)
        return change.token, self._membership_answer(code, -1, self.member_state.configuration,
                                                     f"the configuration entry did not commit: {text}")


__all__ = ["ChangeRefused", "OPS", "Reconfiguring", "plan_change"]
