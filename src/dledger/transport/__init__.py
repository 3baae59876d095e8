"""Transports move ``protocol.Envelope`` objects between nodes; they never look inside.

The ``Transport`` protocol is all the runtime needs: ``send(envelope)`` (fire and forget; a
transport may drop, and the core copes), ``set_receiver(callback)`` (the callback is called
on the owning runtime's thread with every envelope addressed to this endpoint), and
``close()``. Request/response matching uses the envelope's request id, so adding a message
kind never touches a transport.
"""

from __future__ import annotations

from typing import Callable, Protocol

from dledger.protocol import Envelope

Receiver = Callable[[Envelope], None]


class Transport(Protocol):
    def send(self, envelope: Envelope) -> None: ...

    def set_receiver(self, receiver: Receiver) -> None: ...

    def close(self) -> None: ...


__all__ = ["Receiver", "Transport"]
