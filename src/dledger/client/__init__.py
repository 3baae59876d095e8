"""The application's client of a DLedger group over TCP.

``DLedgerClient`` (blocking; it runs an ``AsyncDLedgerClient`` on a private event loop thread)
and ``AsyncDLedgerClient`` (asyncio). Both: ``append``, ``batch_append``, ``get``, ``metadata``,
``status``, ``transfer_leadership``, the membership calls (``add_learner``, ``promote``,
``remove_member``, ``add_member``, ``members``: ``client.membership``), ``close``, and use as a
context manager. Which failures are
resent and which are reported as ``AppendOutcomeUnknown`` is in ``client.aio``; the exception
types are in ``client.errors``. Modules: ``connection`` (one node's connection), ``aio``,
``membership``, ``errors``, and the blocking wrapper here.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

from dledger.client.aio import AsyncDLedgerClient
from dledger.client.errors import AppendOutcomeUnknown, AppendRefusedError, ClusterUnavailableError
from dledger.entry import DLedgerEntry
from dledger.client.membership import ADD_MEMBER_TIMEOUT_S
from dledger.protocol import AppendEntryResponse, LeadershipTransferResponse, MembershipResponse, ReadMode


class DLedgerClient:
    """Blocking client: the same calls as ``AsyncDLedgerClient``, from any thread."""

    def __init__(self, peers: str, group: str, secret: bytes | str | Sequence | None = None,
                 timeout_s: float = 3.0, **kwargs) -> None:
        self._aio = AsyncDLedgerClient(peers, group, secret, timeout_s, **kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dledger-client", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def client_id(self) -> str:
        return self._aio.client_id

    @property
    def leader_id(self) -> str | None:
        return self._aio.leader_id

    def _run(self, coro) -> Any:
        if self._closed:
            coro.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def append(self, body: bytes) -> AppendEntryResponse:
        return self._run(self._aio.append(body))

    def batch_append(self, bodies: Sequence[bytes]) -> AppendEntryResponse:
        return self._run(self._aio.batch_append(bodies))

    def get(self, index: int, mode: ReadMode | int | str = ReadMode.READ_INDEX_READ,
            node_id: str | None = None) -> DLedgerEntry:
        return self._run(self._aio.get(index, mode, node_id))

    def metadata(self) -> dict[str, Any]:
        return self._run(self._aio.metadata())

    def node_metadata(self, node_id: str) -> dict[str, Any]:
        return self._run(self._aio.node_metadata(node_id))

    def status(self) -> dict[str, dict[str, Any]]:
        return self._run(self._aio.status())

    def transfer_leadership(self, target_id: str) -> LeadershipTransferResponse:
        return self._run(self._aio.transfer_leadership(target_id))

    def add_learner(self, node_id: str, address: str, *, timeout_s: float | None = None) -> MembershipResponse:
        return self._run(self._aio.add_learner(node_id, address, timeout_s=timeout_s))

    def promote(self, node_id: str, *, timeout_s: float | None = None) -> MembershipResponse:
        return self._run(self._aio.promote(node_id, timeout_s=timeout_s))

    def remove_member(self, node_id: str, *, timeout_s: float | None = None) -> MembershipResponse:
        return self._run(self._aio.remove_member(node_id, timeout_s=timeout_s))

    def add_member(self, node_id: str, address: str, *, learner_only: bool = False,
                   timeout_s: float = ADD_MEMBER_TIMEOUT_S) -> MembershipResponse:
        return self._run(self._aio.add_member(node_id, address, learner_only=learner_only, timeout_s=timeout_s))

    def members(self) -> dict[str, Any]:
        return self._run(self._aio.members())

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._run(self._aio.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __enter__(self) -> "DLedgerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["AppendOutcomeUnknown", "AppendRefusedError", "AsyncDLedgerClient", "ClusterUnavailableError",
           "DLedgerClient"]
