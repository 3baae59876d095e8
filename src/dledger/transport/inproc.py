"""In-process transport: many nodes in one process, each on its runtime's event loop.

A ``Hub`` maps ``(group, node id)`` to an endpoint. ``send`` hands the envelope to the
destination endpoint's runtime (``call_soon`` when it is the sender's runtime, else
``call_soon_threadsafe``); nothing is copied unless ``encode=True``, which round-trips every
envelope through the msgpack codec (to exercise it in tests). Envelopes for unknown or closed
endpoints are dropped, as a network would. A hub refuses a second open endpoint with the same
group and id (``EndpointInUseError``): each hub is one network, and the process-wide default
hub is the process's.
"""

from __future__ import annotations

import threading

from dledger.protocol import Envelope, decode_envelope, encode_envelope
from dledger.transport import EndpointInUseError, Receiver


class Hub:
    def __init__(self) -> None:
        self._endpoints: dict[tuple[str, str], "InProcTransport"] = {}
        self._lock = threading.Lock()

    def endpoint(self, group: str, node_id: str, runtime, *, encode: bool = False) -> "InProcTransport":
        ep = InProcTransport(self, group, node_id, runtime, encode=encode)
        with self._lock:
            old = self._endpoints.get((group, node_id))
            if old is not None and not old.closed:
                raise EndpointInUseError(f"node {node_id!r} of group {group!r} is already on this hub")
            self._endpoints[(group, node_id)] = ep
        return ep

    def lookup(self, group: str, node_id: str) -> "InProcTransport | None":
        return self._endpoints.get((group, node_id))

    def remove(self, ep: "InProcTransport") -> None:
        with self._lock:
            if self._endpoints.get((ep.group, ep.node_id)) is ep:
                del self._endpoints[(ep.group, ep.node_id)]


_DEFAULT_HUB = Hub()


def default_hub() -> Hub:
    return _DEFAULT_HUB


class InProcTransport:
    def __init__(self, hub: Hub, group: str, node_id: str, runtime, *, encode: bool = False) -> None:
        self.hub = hub
        self.group = group
        self.node_id = node_id
        self.runtime = runtime
        self.encode = encode
        self.receiver: Receiver | None = None
        self.closed = False

    def set_receiver(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def send(self, envelope: Envelope) -> None:
        dst = self.hub.lookup(self.group, envelope.dst)
        if dst is None or dst.closed or dst.receiver is None or self.closed:
            return
        if self.encode:
            envelope = decode_envelope(encode_envelope(envelope))
        if dst.runtime is self.runtime:
            dst.runtime.call_soon(dst._deliver, envelope)
        else:
            dst.runtime.call_soon_threadsafe(dst._deliver, envelope)

    def _deliver(self, envelope: Envelope) -> None:
        if not self.closed and self.receiver is not None:
            self.receiver(envelope)

    def close(self) -> None:
        self.closed = True
        self.hub.remove(self)
