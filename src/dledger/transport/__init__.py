"""Transports move ``protocol.Envelope`` objects between nodes; they never look inside.

The ``Transport`` protocol is all the runtime needs: ``send(envelope)`` (fire and forget; a
transport may drop, and the core copes), ``set_receiver(callback)`` (the callback is called
on the owning runtime's thread with every envelope addressed to this endpoint), and
``close()``. Request/response matching uses the envelope's request id, so adding a message
kind never touches a transport.

Modules: ``frames`` (the sans-IO frame codec, shared with the simulator), ``inproc`` (many
nodes in one process), ``tcp`` with ``tcp_connection`` (asyncio streams, many groups on one
port) and ``auth`` (the connection handshake, the shared secret, TLS contexts).
"""

from __future__ import annotations

from typing import Callable, Protocol

from dledger.protocol import Envelope

Receiver = Callable[[Envelope], None]


class EndpointInUseError(RuntimeError):
    """A node of the same group and id is already registered (two servers with one identity
    would steal each other's messages)."""


class Transport(Protocol):
    def send(self, envelope: Envelope) -> None: ...

    def set_receiver(self, receiver: Receiver) -> None: ...

    def close(self) -> None: ...


__all__ = ["EndpointInUseError", "Receiver", "Transport"]
