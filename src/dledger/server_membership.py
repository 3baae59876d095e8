"""The membership methods of ``DLedgerServer`` (a mixin): add a learner, promote, remove, add.

Each returns a ``concurrent.futures.Future`` of the leader's ``MembershipResponse`` (``code``
SUCCESS once the configuration entry committed, with its ``index`` and the new ``voters`` and
``learners``; otherwise the refusal's code and ``message``, e.g. NOT_LEADER naming the leader,
MEMBERSHIP_CHANGE_PENDING, FALL_BEHIND_TOO_MUCH), and has an ``_async`` twin. They must be
called on the leader (``DLedgerClient`` finds it for you). The rules are in
``dledger.core.membership_change`` and docs/operations.md.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from dledger.errors import DLedgerResponseCode as Code
from dledger.protocol import MembershipResponse
from dledger.runtime.driver import MEMBERSHIP, Op

#: ``add_member`` checks whether the learner caught up this often (ms)
CATCH_UP_CHECK_MS = 100
#: the promotion's answers ``add_member`` asks again after (the learner lags; a change or the
#: leader's first commit is still under way)
_RETRIED = (Code.FALL_BEHIND_TOO_MUCH, Code.MEMBERSHIP_CHANGE_PENDING, Code.LEADER_NOT_READY)


class MembershipMethods:
    def add_learner(self, node_id: str, address: str) -> Future:
        """Add ``node_id`` (reachable at ``address``, ``host:port``) as a learner: it receives the
        log and counts toward nothing."""
        return self._change("add_learner", node_id, address)

    def promote(self, node_id: str) -> Future:
        """Make learner ``node_id`` a voter (refused while it lags more than
        ``learner_max_lag_entries`` behind the leader)."""
        return self._change("promote", node_id)

    def remove_member(self, node_id: str) -> Future:
        """Remove ``node_id`` (a voter or a learner). Removing the leader hands leadership to
        the most caught-up voter first: the answer is LEADER_TRANSFERRING; ask the new leader."""
        return self._change("remove", node_id)

    def add_member(self, node_id: str, address: str, *, timeout_ms: int = 60_000) -> Future:
        """Add ``node_id`` as a learner, wait until it caught up, promote it: the future of the
        promotion's answer (or of the step that failed; FALL_BEHIND_TOO_MUCH when it did not
        catch up within ``timeout_ms``). A node already a learner is only promoted."""
        out: Future = Future()
        deadline = self.runtime.now_ms() + timeout_ms

        def promote_when_caught_up(_f: Future | None = None) -> None:
            f = self.promote(node_id)
            f.add_done_callback(promoted)

        def promoted(f: Future) -> None:
            resp = _result(f)
            if resp is None:
                return _fail(out, f)
            if resp.code in _RETRIED and self.runtime.now_ms() < deadline:
                self.runtime.call_soon_threadsafe(
                    lambda: self.runtime.call_at(self.runtime.now_ms() + CATCH_UP_CHECK_MS, promote_when_caught_up))
                return None
            return _settle(out, resp)

        def added(f: Future) -> None:
            resp = _result(f)
            if resp is None:
                return _fail(out, f)
            if resp.code == Code.SUCCESS or resp.code == Code.UNEXPECTED_MEMBER and node_id in resp.learners:
                return promote_when_caught_up()
            return _settle(out, resp)

        self.add_learner(node_id, address).add_done_callback(added)
        return out

    # -- async twins ----------------------------------------------------------------------
    async def add_learner_async(self, node_id: str, address: str) -> MembershipResponse:
        return await asyncio.wrap_future(self.add_learner(node_id, address))

    async def promote_async(self, node_id: str) -> MembershipResponse:
        return await asyncio.wrap_future(self.promote(node_id))

    async def remove_member_async(self, node_id: str) -> MembershipResponse:
        return await asyncio.wrap_future(self.remove_member(node_id))

    async def add_member_async(self, node_id: str, address: str, *, timeout_ms: int = 60_000) -> MembershipResponse:
        return await asyncio.wrap_future(self.add_member(node_id, address, timeout_ms=timeout_ms))

    # -- the request ------------------------------------------------------------------------
    def _change(self, change: str, node_id: str, address: str = "") -> Future:
        if not isinstance(node_id, str) or not isinstance(address, str):
            raise TypeError("node_id and address must be strings")
        f: Future = Future()
        if self._refused(Op(f, MEMBERSHIP)):
            return f
        self._check_started()
        op = Op(f, MEMBERSHIP, self._now())
        self.runtime.call_soon_threadsafe(lambda: self.driver.change_membership(op, change, node_id, address))
        return f


def _result(f: Future) -> MembershipResponse | None:
    return None if f.cancelled() or f.exception() is not None else f.result()


def _fail(out: Future, f: Future) -> None:
    if not out.done():
        out.set_exception(f.exception() if not f.cancelled() else RuntimeError("cancelled"))


def _settle(out: Future, resp: MembershipResponse) -> None:
    if not out.done():
        out.set_result(resp)
