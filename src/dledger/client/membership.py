"""The membership calls of ``AsyncDLedgerClient`` (a mixin): add a learner, promote, remove, add.

Each call is sent to the leader, found and followed as for appends (a NOT_LEADER answer names
the leader; LEADER_TRANSFERRING, which removing the leader answers while leadership moves to the
most caught-up voter, is waited out and the new leader is asked). The answer is the leader's
``MembershipResponse``: SUCCESS once the configuration entry committed, with its ``index`` and
the new ``voters`` and ``learners``, or a refusal with its ``code`` and ``message``.

A change is asked again, until the call's time runs out, after:
- a lost answer (a broken connection, no answer in time) and the answers a leader gives when it
  lost its leadership before the entry committed (EXPIRED_TERM, WAIT_QUORUM_ACK_TIMEOUT): the
  change may have been made all the same;
- MEMBERSHIP_CHANGE_PENDING (changes go one at a time: the one before is not committed yet) and
  LEADER_NOT_READY (a new leader has not committed an entry of its term yet).
Asking again is safe because the leader checks the configuration: a change already made is
refused (UNEXPECTED_MEMBER after an add, UNKNOWN_MEMBER after a remove, UNEXPECTED_ARGUMENT
after a promotion). When such a refusal answers a call that had asked before, and the
configuration it carries shows the member in the state the call wanted, the call succeeds: the
answer's code is SUCCESS, its ``index`` -1 and its ``message`` says the change was found made.
A first attempt's refusal is returned as it is (``dledger member remove n7`` of a group without
n7 says so).

``add_member`` is ``add_learner``, then ``promote`` asked again while the learner lags
(FALL_BEHIND_TOO_MUCH) until it has caught up or the time runs out. A member that is already a
learner is only promoted; one already a voter is success at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from dledger.client.errors import ClusterUnavailableError
from dledger.protocol import DLedgerResponseCode as Code, MembershipRequest, MembershipResponse

#: the answers after which a change is asked again while time remains (see above)
RETRIED = (Code.MEMBERSHIP_CHANGE_PENDING, Code.LEADER_NOT_READY, Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT)
#: how long ``add_member`` gives a learner to catch up, by default (seconds)
ADD_MEMBER_TIMEOUT_S = 60.0
#: how often ``add_member`` asks again to promote a learner that lags (seconds)
CATCH_UP_CHECK_S = 0.2


def in_wanted_state(op: str, node_id: str, address: str, resp: MembershipResponse) -> bool:
    """Whether the configuration ``resp`` carries already shows what ``op`` wanted."""
    voters, learners = resp.voters or {}, resp.learners or {}
    if not voters:                              # no configuration in the answer: nothing shown
        return False
    if op == "add_learner":
        held = learners.get(node_id, voters.get(node_id))
        return held is not None and (not address or held == address)
    if op == "promote":
        return node_id in voters
    if op == "remove":
        return node_id not in voters and node_id not in learners
    return False


def describe(voters: dict, learners: dict) -> str:
    """``voters n0, n1, n2; learners n3`` (as the nodes' messages say it)."""
    text = "voters " + (", ".join(sorted(voters)) or "-")
    return text + ("; learners " + ", ".join(sorted(learners)) if learners else "")


class MembershipCalls:
    """``add_learner``, ``promote``, ``remove_member``, ``add_member`` and ``members`` of
    ``AsyncDLedgerClient``."""

    async def add_learner(self, node_id: str, address: str, *, timeout_s: float | None = None) -> MembershipResponse:
        """Add ``node_id``, reachable at ``address`` (``host:port``), as a learner: it receives
        the log and counts toward no quorum."""
        _check_id(node_id)
        if not isinstance(address, str) or ":" not in address:
            raise ValueError(f"the address of {node_id} must be host:port, got {address!r}")
        return await self._change("add_learner", node_id, address, self._deadline(timeout_s))

    async def promote(self, node_id: str, *, timeout_s: float | None = None) -> MembershipResponse:
        """Make learner ``node_id`` a voter (refused, FALL_BEHIND_TOO_MUCH, while it lags more than
        the leader's ``learner_max_lag_entries``)."""
        _check_id(node_id)
        return await self._change("promote", node_id, "", self._deadline(timeout_s))

    async def remove_member(self, node_id: str, *, timeout_s: float | None = None) -> MembershipResponse:
        """Remove ``node_id`` (a voter or a learner; the leader too: leadership moves first)."""
        _check_id(node_id)
        return await self._change("remove", node_id, "", self._deadline(timeout_s))

    async def add_member(self, node_id: str, address: str, *, learner_only: bool = False,
                         timeout_s: float = ADD_MEMBER_TIMEOUT_S) -> MembershipResponse:
        """Add ``node_id`` as a learner, then promote it once it has caught up (``learner_only``:
        stop after the first step). ``timeout_s`` bounds the whole (60 s by default): the answer
        is the promotion's, or the refusal of the step that failed (FALL_BEHIND_TOO_MUCH when the
        learner did not catch up in time)."""
        _check_id(node_id)
        if not isinstance(address, str) or ":" not in address:
            raise ValueError(f"the address of {node_id} must be host:port, got {address!r}")
        deadline = self._deadline(timeout_s)
        added = await self._change("add_learner", node_id, address, deadline)
        if added.code == Code.UNEXPECTED_MEMBER and in_wanted_state("add_learner", node_id, address, added):
            added = _found_made(added, f"{node_id} is already a member")
        if added.code != Code.SUCCESS or learner_only:
            return added
        if node_id in added.voters:
            return added
        loop = asyncio.get_running_loop()
        while True:
            resp = await self._change("promote", node_id, "", deadline)
            if resp.code != Code.FALL_BEHIND_TOO_MUCH or self._remaining(deadline) <= CATCH_UP_CHECK_S:
                return resp
            await asyncio.sleep(min(CATCH_UP_CHECK_S, max(0.0, deadline - loop.time())))

    async def members(self) -> dict[str, Any]:
        """The leader's view of the configuration: ``leader_id``, ``term``, ``config_index``,
        ``ledger_end_index``, ``committed_index`` and ``members``: one dict per member (voters
        first, then learners, each sorted by id) with ``id``, ``address``, ``role`` (``voter`` or
        ``learner``), ``match_index`` (the highest index the leader knows it holds; -1 none yet)
        and ``lag`` (the leader's log end less it)."""
        meta = await self.metadata()
        return members_view(meta)

    # -- the request ------------------------------------------------------------------------
    def _deadline(self, timeout_s: float | None) -> float:
        seconds = self.timeout_s if timeout_s is None else float(timeout_s)
        if not seconds > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        return asyncio.get_running_loop().time() + seconds

    async def _change(self, op: str, node_id: str, address: str, deadline: float) -> MembershipResponse:
        """Ask the leader for one change until an answer not ``RETRIED`` comes or the time runs
        out (then the last answer, or ``ClusterUnavailableError`` when none came)."""
        sent = 0
        last: MembershipResponse | None = None
        attempt = 0

        def request(target: str) -> MembershipRequest:
            nonlocal sent
            sent += 1
            return MembershipRequest(group=self.group, local_id=self.client_id, remote_id=target, op=op,
                                     node_id=node_id, address=address)

        while True:
            if last is not None and self._remaining(deadline) <= 0:
                return last
            try:
                _target, resp = await self._leader_call(request, resend_after_loss=True, deadline=deadline)
            except ClusterUnavailableError:
                if last is not None:
                    return last
                raise
            self._learn(resp.voters)
            self._learn(resp.learners)
            if resp.code == Code.SUCCESS:
                return resp
            if sent > 1 and in_wanted_state(op, node_id, address, resp):
                return _found_made(resp, f"{op} {node_id} was found made (an earlier attempt's answer was lost)")
            if resp.code not in RETRIED:
                return resp
            last = resp
            if resp.code in (Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT):
                self.leader_id = None           # it may lead no more: ask who does
            await self._backoff(attempt, deadline)
            attempt += 1


def _found_made(resp: MembershipResponse, message: str) -> MembershipResponse:
    return replace(resp, code=int(Code.SUCCESS), index=-1, message=message)


def _check_id(node_id: Any) -> None:
    if not isinstance(node_id, str) or not node_id or "-" in node_id or ";" in node_id:
        raise ValueError(f"a member id is a non-empty string without '-' or ';', got {node_id!r}")


def members_view(meta: dict[str, Any]) -> dict[str, Any]:
    """``members()``'s answer from the leader's metadata (``AsyncDLedgerClient.node_metadata``)."""
    end = meta.get("ledger_end_index", -1)
    match = meta.get("match_index") or {}
    rows = []
    for role, table in (("voter", meta.get("voters") or {}), ("learner", meta.get("learners") or {})):
        for node_id in sorted(table):
            m = match.get(node_id)
            rows.append({"id": node_id, "address": table[node_id], "role": role,
                         "match_index": m if m is not None else -1,
                         "lag": end - m if m is not None and m >= 0 else None})
    return {"leader_id": meta.get("leader_id"), "term": meta.get("term"), "config_index": meta.get("config_index", -1),
            "ledger_end_index": end, "committed_index": meta.get("committed_index"), "members": rows}


__all__ = ["ADD_MEMBER_TIMEOUT_S", "MembershipCalls", "RETRIED", "describe", "in_wanted_state", "members_view"]
