"""SimNetwork: the simulated network; each endpoint implements ``transport.Transport``.

Fault model (every draw comes from the network's own seeded ``random.Random``):
- delay: uniform in ``[min_delay_ms, max_delay_ms]`` per message, so messages between the
  same two nodes can overtake each other (reordering);
- loss: each message is dropped with probability ``loss``;
- duplication: each message is delivered a second time (with its own delay) with
  probability ``duplicate``;
- partitions: a set of blocked *directed* links; ``partition(a, b)`` blocks both directions
  between two groups, ``cut(src, dst)`` one direction only (asymmetric). A message is
  dropped if its link is blocked when it is sent or when it would be delivered;
- a crashed node's endpoint is closed: messages to it are dropped on delivery, and
  messages it had in flight still arrive (as on a real network).

Every envelope crosses the network as bytes: it is encoded with the production wire codec
(``protocol.encode_envelope``) when sent and decoded (``decode_envelope``) at each delivery, so
the receiver gets a fresh object built from the bytes (a duplicate is decoded again), exactly as
over TCP. ``NetworkOptions(codec=False)`` hands the sent object itself to the receiver instead
(faster; sender and receiver then share one object).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dledger.protocol import Envelope, decode_envelope, encode_envelope


@dataclass(slots=True)
class NetworkOptions:
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    loss: float = 0.0
    duplicate: float = 0.0
    #: encode every envelope at send and decode it at delivery (the production wire codec)
    codec: bool = True


class SimEndpoint:
    def __init__(self, network: "SimNetwork", node_id: str) -> None:
        self.network = network
        self.node_id = node_id
        self.receiver = None
        self.closed = False

    def set_receiver(self, receiver) -> None:
        self.receiver = receiver

    def send(self, envelope: Envelope) -> None:
        if not self.closed:
            self.network._send(envelope)

    def close(self) -> None:
        self.closed = True


class SimNetwork:
    def __init__(self, scheduler, rng: random.Random, options: NetworkOptions | None = None) -> None:
        self.scheduler = scheduler
        self.rng = rng
        self.options = options or NetworkOptions()
        self.endpoints: dict[str, SimEndpoint] = {}
        self.blocked: set[tuple[str, str]] = set()
        #: optional ``drop_if(envelope) -> bool``: a test's own message filter
        self.drop_if = None
        self.sent = 0
        self.delivered = 0
        self.dropped = 0

    def endpoint(self, node_id: str) -> SimEndpoint:
        ep = SimEndpoint(self, node_id)
        self.endpoints[node_id] = ep
        return ep

    # -- faults ---------------------------------------------------------------------------
    def partition(self, *groups) -> None:
        """Block every link between nodes of different groups (both directions)."""
        groups = [list(g) for g in groups]
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                for x in a:
                    for y in b:
                        self.blocked.add((x, y))
                        self.blocked.add((y, x))

    def cut(self, src: str, dst: str) -> None:
        self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()

    # -- moving envelopes -----------------------------------------------------------------
    def _delay(self) -> int:
        o = self.options
        return o.min_delay_ms + self.rng.randrange(o.max_delay_ms - o.min_delay_ms + 1)

    def _send(self, env: Envelope) -> None:
        self.sent += 1
        o = self.options
        if (env.src, env.dst) in self.blocked or (o.loss and self.rng.random() < o.loss) \
                or (self.drop_if is not None and self.drop_if(env)):
            self.dropped += 1
            return
        now = self.scheduler.now
        payload = encode_envelope(env) if o.codec else env
        self.scheduler.call_at(now + self._delay(), self._deliver, env.src, env.dst, payload)
        if o.duplicate and self.rng.random() < o.duplicate:
            self.scheduler.call_at(now + self._delay(), self._deliver, env.src, env.dst, payload)

    def _deliver(self, src: str, dst: str, payload: "bytes | Envelope") -> None:
        ep = self.endpoints.get(dst)
        if ep is None or ep.closed or ep.receiver is None or (src, dst) in self.blocked:
            self.dropped += 1
            return
        self.delivered += 1
        ep.receiver(decode_envelope(payload) if type(payload) is bytes else payload)
