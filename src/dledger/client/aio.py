"""AsyncDLedgerClient: an application's asyncio client of a DLedger group over TCP.

``AsyncDLedgerClient(peers, group, secret=None, timeout_s=3.0)`` talks to the nodes listed in
``peers`` (the nodes' own string, or part of it: the members a node names in its metadata are
added). Every call has ``timeout_s`` seconds:
- the leader is found through metadata (any node names it) and remembered; a NOT_LEADER answer
  names the new leader (its hint is followed), and LEADER_TRANSFERRING or LEADER_PENDING_FULL
  are waited out; between attempts the client backs off (20 ms doubling to 500 ms, jittered);
- an append is sent again only when it certainly was not taken: its connection could not be
  opened, or the node answered NOT_LEADER, LEADER_TRANSFERRING or LEADER_PENDING_FULL. Once an
  append was sent and its answer is lost (connection broken, no answer in time) or the answer
  is EXPIRED_TERM, WAIT_QUORUM_ACK_TIMEOUT or INTERNAL_ERROR (the node failed while it held
  the append, a leader shutting down, say), it raises ``AppendOutcomeUnknown`` and is not
  resent: a resend could store the body twice (the leader does not de-duplicate). When every
  attempt failed before the append was taken, it raises ``ClusterUnavailableError``: nothing
  was appended;
- reads (``get``, ``metadata``) and leadership transfers are retried after any failure;
  ``get`` is a linearizable read by default (READ_INDEX_READ: the node confirms with a quorum
  that it still leads before it answers), a local read of one node's log with UNSAFE_READ;
- appends made while four requests are already in flight wait and then travel together as one
  batch append (``client.coalesce``; ``coalesce=False`` sends each alone); each caller still
  gets its own entry's index and position, and the rules above hold for each of them.
A body larger than any node stores (``MAX_BODY``: 4 MiB less the 48-byte entry header) raises
``EntryTooLargeError`` before anything is sent; a node whose smaller data segments refuse a
body says so (``AppendRefusedError`` naming the body's size and the node's limit, which the
client asks it for: ``MetadataResponse.max_body_size``).
The secret: ``secret`` (bytes or str; a list of keys for rotation), else ``secret_file`` (one
key a line), else the ``DLEDGER_SECRET`` environment variable, else none, as for the nodes.
``tls=(cert_file, key_file, ca_file)`` connects with mutual TLS (a certificate the cluster CA
signed; the nodes' certificates are checked against ``ca_file``).
"""

from __future__ import annotations

import asyncio
import random
import secrets as _secrets
from dataclasses import replace
from typing import Any, Sequence

from dledger.client.coalesce import AppendCoalescer
from dledger.client.connection import AnswerLost, NodeConnection, NotSent
from dledger.client.errors import AppendOutcomeUnknown, AppendRefusedError, ClusterUnavailableError
from dledger.client.membership import MembershipCalls
from dledger.config import parse_peers
from dledger.entry import BODY_OFFSET, MAX_RECORD_SIZE, DLedgerEntry, decode
from dledger.errors import DLedgerError, EntryTooLargeError
from dledger.protocol import (AppendEntryRequest, AppendEntryResponse, BatchAppendEntryRequest,
                              DLedgerResponseCode as Code, GetEntriesRequest, LeadershipTransferRequest,
                              LeadershipTransferResponse, MetadataRequest, ReadMode)
from dledger.transport.auth import client_tls_context, load_secret

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.02, 0.5
#: answers given before the leader took the append: a resend cannot duplicate it
NOT_TAKEN = (Code.NOT_LEADER, Code.LEADER_TRANSFERRING, Code.LEADER_PENDING_FULL)
#: answers after which the append may still commit (INTERNAL_ERROR: the node failed while it
#: held the append, as a leader that shuts down fails its pending appends, which are in its log)
UNCLEAR = (Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT, Code.INTERNAL_ERROR)
#: the largest body any node stores (a record is at most ``MAX_RECORD_SIZE`` with its header);
#: a node whose data segments are smaller than that takes less: its segment size less 56 bytes
MAX_BODY = MAX_RECORD_SIZE - BODY_OFFSET


def _check_sizes(bodies: Sequence[bytes]) -> None:
    """Refuse, before anything is sent, a body no node could store."""
    big = max(map(len, bodies), default=0)
    if big > MAX_BODY:
        raise EntryTooLargeError(f"a body of {big:,} bytes is over the largest entry a node stores "
                                 f"({MAX_BODY:,} bytes); nothing was sent")


def _keys(secret, secret_file: str | None) -> tuple[bytes, ...]:
    if secret is None:
        return load_secret(secret_file)
    items = [secret] if isinstance(secret, (bytes, str)) else list(secret)
    keys = tuple(k.encode() if isinstance(k, str) else bytes(k) for k in items)
    if not keys or any(len(k) < 16 for k in keys):
        raise ValueError("a secret has at least 16 bytes")
    return keys


class AsyncDLedgerClient(MembershipCalls):
    def __init__(self, peers: str, group: str, secret: bytes | str | Sequence | None = None,
                 timeout_s: float = 3.0, *, secret_file: str | None = None, client_id: str | None = None,
                 tls: tuple[str, str, str] | None = None, rng: random.Random | None = None,
                 coalesce: bool = True) -> None:
        self.peers = parse_peers(peers)
        if not self.peers:
            raise ValueError("peers names no node")
        if not group:
            raise ValueError("group is empty")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.group = group
        self.timeout_s = float(timeout_s)
        self.client_id = client_id or f"client-{_secrets.token_hex(8)}"
        self._keys = keys = _keys(secret, secret_file)
        self._ssl = client_tls_context(*tls) if tls else None
        self.rng = rng or random.Random()
        self.leader_id: str | None = None
        self._why_no_leader = "no node named a leader"
        self._conns = {nid: NodeConnection(group, self.client_id, nid, addr, keys, self._ssl)
                       for nid, addr in self.peers.items()}
        self._closed = False
        self._coalescer = AppendCoalescer(self._send_appends) if coalesce else None

    # -- plumbing ----------------------------------------------------------------------------
    def _learn(self, peers: Any) -> None:
        """Add the members a node names that ``peers`` did not list (a client may be given one
        address: any node leads it to the rest)."""
        if not isinstance(peers, dict):
            return
        for node_id, addr in peers.items():
            if node_id not in self.peers and isinstance(node_id, str) and isinstance(addr, str):
                try:
                    conn = NodeConnection(self.group, self.client_id, node_id, addr, self._keys, self._ssl)
                except ValueError:
                    continue
                self.peers[node_id] = addr
                self._conns[node_id] = conn

    def _remaining(self, deadline: float) -> float:
        return deadline - asyncio.get_running_loop().time()

    async def _backoff(self, attempt: int, deadline: float) -> None:
        delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * (2 ** min(attempt, 10)))
        delay = delay / 2 + self.rng.random() * delay / 2
        await asyncio.sleep(max(0.0, min(delay, self._remaining(deadline))))

    async def _ask(self, node_id: str, msg: Any, deadline: float) -> Any:
        if self._closed:
            raise RuntimeError("the client is closed")
        remaining = self._remaining(deadline)
        if remaining <= 0:
            raise NotSent("the timeout passed")
        return await self._conns[node_id].request(msg, remaining)

    async def _find_leader(self, deadline: float) -> str | None:
        """Ask each node (the remembered leader first) who leads; None if none knows in time."""
        order = sorted(self.peers, key=lambda n: n != self.leader_id)
        self._why_no_leader = "no node named a leader"
        unreachable = 0
        waiting: list[str] = []          # the reasons the nodes give for knowing no leader
        for node_id in order:
            if self._remaining(deadline) <= 0:
                break
            try:
                resp = await self._ask(node_id, MetadataRequest(group=self.group, local_id=self.client_id,
                                                                remote_id=node_id),
                                       min(deadline, asyncio.get_running_loop().time() + 1.0))
            except (NotSent, AnswerLost) as exc:
                unreachable += 1
                if unreachable == len(order):
                    self._why_no_leader = f"no node could be reached; the last: {exc}"
                continue
            if resp.code == Code.SUCCESS:
                self._learn(resp.peers)
                self._learn(resp.voters)
                self._learn(resp.learners)
            if resp.code == Code.SUCCESS and resp.leader_id in self.peers:
                self.leader_id = resp.leader_id
                return resp.leader_id
            if resp.code == Code.SUCCESS and resp.waiting:
                waiting.append(f"{node_id}: {resp.waiting}")
        if waiting:
            self._why_no_leader = "no node named a leader; " + " | ".join(waiting)
        return None

    async def _leader_call(self, make, *, resend_after_loss: bool, deadline: float | None = None
                           ) -> tuple[str, Any]:
        """Send ``make(leader_id)`` to the leader until an answer other than NOT_TAKEN comes.
        ``resend_after_loss=False`` (appends): a lost answer raises ``AppendOutcomeUnknown``."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.timeout_s
        attempt, why = 0, "no node answered"
        while True:
            if self._remaining(deadline) <= 0:
                raise ClusterUnavailableError(f"no leader of group {self.group!r} took the request within "
                                              f"{self.timeout_s:g} s ({why})")
            target = self.leader_id or await self._find_leader(deadline)
            if target is None:
                why = self._why_no_leader
                await self._backoff(attempt, deadline)
                attempt += 1
                continue
            try:
                resp = await self._ask(target, make(target), deadline)
            except NotSent as exc:
                why = str(exc)
                self.leader_id = None
                await self._backoff(attempt, deadline)
                attempt += 1
                continue
            except AnswerLost as exc:
                self.leader_id = None
                if not resend_after_loss:
                    raise AppendOutcomeUnknown(f"the append may have been committed: {exc}", node_id=target) from None
                why = str(exc)
                await self._backoff(attempt, deadline)
                attempt += 1
                continue
            if resp.code in NOT_TAKEN:
                why = f"{target} answered {Code(resp.code).name}"
                hint = resp.leader_id if resp.code == Code.NOT_LEADER else None
                self.leader_id = hint if hint in self.peers and hint != target else None
                if self.leader_id is None:
                    await self._backoff(attempt, deadline)
                    attempt += 1
                continue
            return target, resp

    # -- appends -----------------------------------------------------------------------------
    async def _check_append(self, target: str, resp: AppendEntryResponse, bodies: Sequence[bytes] = ()
                            ) -> AppendEntryResponse:
        if resp.code == Code.SUCCESS:
            return resp
        name = Code(resp.code).name if resp.code in Code._value2member_map_ else str(resp.code)
        if resp.code in UNCLEAR or resp.code not in Code._value2member_map_:
            raise AppendOutcomeUnknown(f"{target} answered {name}: the append may still commit",
                                       node_id=target, response=resp)
        why = ""
        if resp.code == Code.UNEXPECTED_ARGUMENT and bodies:
            # the one reason a leader refuses a well-formed append so: a body over its entry limit
            limit = await self._body_limit(target)
            why = (f": a body of {max(map(len, bodies)):,} bytes is over its entry size limit, "
                   + (f"{limit:,} bytes" if limit is not None else "which it did not say")
                   + " (a node takes a body of at most its data segment size less 56 bytes)")
        raise AppendRefusedError(f"{target} refused the append: {name}{why}", resp)

    async def _body_limit(self, node_id: str) -> int | None:
        """The largest body ``node_id`` takes, as its metadata says it (None: no answer, or a
        node of an earlier release that does not send it)."""
        try:
            resp = await self._ask(node_id, MetadataRequest(group=self.group, local_id=self.client_id,
                                                            remote_id=node_id),
                                   asyncio.get_running_loop().time() + self.timeout_s)
        except (NotSent, AnswerLost):
            return None
        return resp.max_body_size if resp.code == Code.SUCCESS and resp.max_body_size >= 0 else None

    async def append(self, body: bytes) -> AppendEntryResponse:
        """Append one entry; the leader's SUCCESS answer (``index``, ``term``, ``pos``).
        Appends made while earlier ones are in flight may travel together (``client.coalesce``)."""
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        body = bytes(body)
        _check_sizes((body,))
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        if self._coalescer is None or not self._coalescer.groupable(body):
            return (await self._send_appends([body], deadline))[0]
        return await self._coalescer.append(body, deadline)

    async def _send_appends(self, bodies: list[bytes], deadline: float) -> list[AppendEntryResponse]:
        """One request for ``bodies`` (a single append, or a batch when several waited
        together); each body's own answer."""
        if len(bodies) == 1:
            body = bodies[0]
            target, resp = await self._leader_call(
                lambda t: AppendEntryRequest(group=self.group, local_id=self.client_id, remote_id=t, body=body),
                resend_after_loss=False, deadline=deadline)
            return [await self._check_append(target, resp, bodies)]
        target, resp = await self._leader_call(
            lambda t: BatchAppendEntryRequest(group=self.group, local_id=self.client_id, remote_id=t,
                                              batch_msgs=bodies),
            resend_after_loss=False, deadline=deadline)
        resp = await self._check_append(target, resp, bodies)
        n, positions = len(bodies), resp.positions
        first = resp.index - n + 1
        # each answer as a lone append's: its own index, position and ``positions=[pos]``
        if len(positions) != n:
            return [replace(resp, index=first + k, pos=-1, positions=[]) for k in range(n)]
        return [replace(resp, index=first + k, pos=positions[k], positions=[positions[k]]) for k in range(n)]

    async def batch_append(self, bodies: Sequence[bytes]) -> AppendEntryResponse:
        """Append several entries as one batch (all or none); ``index`` is the last one's and
        ``positions`` lists every position."""
        bodies = [bytes(b) for b in bodies]
        if not bodies:
            raise ValueError("batch_append needs at least one body")
        _check_sizes(bodies)
        target, resp = await self._leader_call(
            lambda t: BatchAppendEntryRequest(group=self.group, local_id=self.client_id, remote_id=t,
                                              batch_msgs=bodies),
            resend_after_loss=False)
        return await self._check_append(target, resp, bodies)

    # -- reads and admin ---------------------------------------------------------------------
    async def get(self, index: int, mode: ReadMode | int | str = ReadMode.READ_INDEX_READ,
                  node_id: str | None = None) -> DLedgerEntry:
        """The committed entry at ``index`` (``DLedgerError`` 410 beyond the commit index).
        ``mode`` (a ``ReadMode``, its number or its name) is how the node serves it:
        READ_INDEX_READ (the default) confirms with a quorum that the node still leads before
        it answers, so an entry committed before the call is never reported missing;
        RAFT_LOG_READ and LEASE_READ as for ``DLedgerServer.read``; UNSAFE_READ answers from
        the node's own log up to its commit index, whatever its role, and may miss recent
        entries. The call goes to the leader (found and followed as for appends), or only to
        ``node_id`` when given (a node that does not lead answers the linearizable modes with
        NOT_LEADER, raised as ``DLedgerError``)."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"index must be a non-negative integer, got {index!r}")
        mode = ReadMode.parse(mode)

        def request(t: str) -> GetEntriesRequest:
            return GetEntriesRequest(group=self.group, local_id=self.client_id, remote_id=t, begin_index=index,
                                     read_mode=int(mode))

        if node_id is None:
            target, resp = await self._leader_call(request, resend_after_loss=True)
        else:
            if node_id not in self.peers:
                raise ValueError(f"{node_id!r} is not in peers")
            target = node_id
            try:
                resp = await self._ask(node_id, request(node_id),
                                       asyncio.get_running_loop().time() + self.timeout_s)
            except (NotSent, AnswerLost) as exc:
                raise ClusterUnavailableError(str(exc)) from None
        if resp.code == Code.INDEX_OUT_OF_RANGE:
            raise DLedgerError(f"index {index} is beyond the committed index", Code.INDEX_OUT_OF_RANGE)
        if resp.code != Code.SUCCESS or not resp.entries:
            name = Code(resp.code).name if resp.code in Code._value2member_map_ else str(resp.code)
            raise DLedgerError(f"{target} could not read index {index}: {name}", resp.code)
        return decode(resp.entries[0])

    async def node_metadata(self, node_id: str) -> dict[str, Any]:
        """What node ``node_id`` says about the group (``NotSent``/``AnswerLost`` become
        ``ClusterUnavailableError``)."""
        if node_id not in self.peers:
            raise ValueError(f"{node_id!r} is not in peers")
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        try:
            resp = await self._ask(node_id, MetadataRequest(group=self.group, local_id=self.client_id,
                                                            remote_id=node_id), deadline)
        except (NotSent, AnswerLost) as exc:
            raise ClusterUnavailableError(str(exc)) from None
        if resp.code != Code.SUCCESS:
            raise DLedgerError(f"{node_id} answered code {resp.code}", resp.code)
        return {"group": resp.group, "node_id": node_id, "address": self.peers[node_id],
                "leader_id": resp.leader_id, "term": resp.term, "peers": dict(resp.peers),
                "role": resp.role, "ledger_end_index": resp.ledger_end_index,
                "ledger_end_term": resp.ledger_end_term, "committed_index": resp.committed_index,
                "waiting": resp.waiting, "voters": dict(resp.voters), "learners": dict(resp.learners),
                "config_index": resp.config_index, "match_index": dict(resp.match_index)}

    async def metadata(self) -> dict[str, Any]:
        """The leader's view of the group: group, node_id, address, leader_id, term, peers, role,
        ledger_end_index, ledger_end_term, committed_index, the configuration in force (voters,
        learners: id -> address; config_index, -1 for the bootstrap one) and match_index (id ->
        the highest index the leader knows each member holds)."""
        target, _resp = await self._leader_call(
            lambda t: MetadataRequest(group=self.group, local_id=self.client_id, remote_id=t),
            resend_after_loss=True)
        return await self.node_metadata(target)

    async def status(self) -> dict[str, dict[str, Any]]:
        """Every node's metadata, or ``{"error": why}`` for a node that did not answer: the nodes
        of ``peers`` and the members their answers name. Each one also says what the leader's
        configuration makes of it: ``member`` (``voter``, ``learner``, or None when not a member
        or when no node that answered leads), ``match`` (the highest index the leader knows it
        holds) and ``lag`` (the leader's log end less ``match``)."""
        async def one(node_id: str) -> dict[str, Any]:
            try:
                return await self.node_metadata(node_id)
            except DLedgerError as exc:
                return {"node_id": node_id, "address": self.peers[node_id], "error": str(exc)}

        status: dict[str, dict[str, Any]] = {}
        while len(status) < len(self.peers):        # members named by an answer are asked too
            todo = [n for n in self.peers if n not in status]
            status.update(zip(todo, await asyncio.gather(*(one(n) for n in todo))))
            for s in status.values():
                self._learn(s.get("voters"))
                self._learn(s.get("learners"))
        leader = max((s for s in status.values() if s.get("role") == "LEADER"), key=lambda s: s["term"], default=None)
        for node_id, s in status.items():
            member = match = lag = None
            if leader is not None:
                member = "voter" if node_id in leader["voters"] else "learner" if node_id in leader["learners"] else None
                match = leader["match_index"].get(node_id)
                lag = leader["ledger_end_index"] - match if match is not None and match >= 0 else None
            s.update(member=member, match=match, lag=lag)
        return status

    async def transfer_leadership(self, target_id: str) -> LeadershipTransferResponse:
        """Ask the leader to hand leadership to ``target_id``; the leader's answer (SUCCESS once
        ``target_id`` leads; SUCCESS at once when it already does). Asked again, with the
        leader's current term, after NOT_LEADER, INCONSISTENT_TERM or a lost answer, and after
        NETWORK_ERROR (the leader could not reach the target: a connection not made yet, say)
        while time remains; that refusal is the answer when the time runs out."""
        if target_id not in self.peers:
            raise ValueError(f"{target_id!r} is not in peers")
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        attempt, why = 0, "no node named a leader"
        refused = None
        while self._remaining(deadline) > 0:
            leader = self.leader_id or await self._find_leader(deadline)
            if leader == target_id:
                return LeadershipTransferResponse(group=self.group, local_id=leader, leader_id=leader,
                                                  code=Code.SUCCESS)
            if leader is not None:
                try:
                    term = (await self.node_metadata(leader))["term"]
                    resp = await self._ask(leader, LeadershipTransferRequest(
                        group=self.group, local_id=self.client_id, remote_id=leader, term=term,
                        transfer_id=leader, transferee_id=target_id), deadline)
                except (NotSent, AnswerLost, ClusterUnavailableError) as exc:
                    why = str(exc)
                else:
                    if resp.code == Code.SUCCESS:
                        self.leader_id = target_id
                        return resp
                    if resp.code == Code.NETWORK_ERROR:
                        refused = resp              # transient, perhaps: asked again while time remains
                    elif resp.code not in (Code.NOT_LEADER, Code.INCONSISTENT_TERM):
                        return resp
                    why = f"{leader} answered {Code(resp.code).name}"
                self.leader_id = None
            await self._backoff(attempt, deadline)
            attempt += 1
        if refused is not None:
            return refused
        raise ClusterUnavailableError(f"no leader of group {self.group!r} took the transfer within "
                                      f"{self.timeout_s:g} s ({why})")

    # -- lifetime ----------------------------------------------------------------------------
    async def close(self) -> None:
        self._closed = True
        for conn in self._conns.values():
            await conn.close()

    async def __aenter__(self) -> "AsyncDLedgerClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


__all__ = ["AsyncDLedgerClient"]
