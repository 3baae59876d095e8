"""SimNetwork: the simulated network; each endpoint implements ``transport.Transport``.

Fault model (every draw comes from the network's own seeded ``random.Random``; an option left
at its default draws nothing, so a seed replays the same with or without the newer options):
- delay: uniform in ``[min_delay_ms, max_delay_ms]`` per message, so messages between the
  same two nodes can overtake each other (reordering); ``link_delays`` (or ``set_link``) gives
  a directed link its own range (a slow or distant link, with its own jitter);
- loss: each message is dropped with probability ``loss``;
- duplication: each message is delivered a second time (with its own delay) with
  probability ``duplicate``;
- replay: with probability ``replay`` a send also re-injects a copy of an older frame, picked
  from the last ``replay_window`` frames sent on any link, delivered after a long delay
  (uniform in ``[replay_min_delay_ms, replay_max_delay_ms]``) to the node it was addressed to
  (``replay_envelope`` replays a chosen one, for scenario tests);
- corruption: each delivered copy has one bit flipped in its encoded bytes with probability
  ``corrupt`` (needs the codec). The receiver's ``decode_frame`` refuses it (the frame's
  CRC-32 does not match) and the network drops it, as a TCP stack drops a segment that fails
  its checksum; a damaged frame that decoded would raise ``AssertionError`` (a codec bug);
- partitions: a set of blocked *directed* links; ``partition(a, b)`` blocks both directions
  between two groups, ``cut(src, dst)`` one direction only (asymmetric), ``block(links)``
  any set of links (``dledger.sim.partitions`` builds the usual shapes). A message is dropped
  if its link is blocked when it is sent or when it would be delivered;
- clogged links: ``clog(src, dst, ms)`` holds every message due on the link for ``ms``, then
  releases them in order (``unclog`` releases them at once); a clogged link loses nothing;
- paused processes: an endpoint bound to a ``SimProcess`` (``endpoint(id, process=...)`` or
  ``bind``) hands what arrives while the process is paused to the process, which delivers it
  in order when it resumes; what a process sends while paused (it paused itself inside the
  crank that sends: a slow sync) leaves when it resumes, or never if it is killed first;
- a crashed node's endpoint is closed: messages to it are dropped on delivery, and
  messages it had in flight still arrive (as on a real network).
``heal()`` ends every partition and clog.

Every envelope crosses the network as bytes: it is encoded with the production wire codec
(``transport.frames.encode_frame``, as over TCP) when sent and decoded (``decode_frame``) at each delivery, so
the receiver gets a fresh object built from the bytes (a duplicate is decoded again), exactly as
over TCP. ``NetworkOptions(codec=False)`` hands the sent object itself to the receiver instead
(faster; sender and receiver then share one object).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from dledger.protocol import Envelope, FrameError
from dledger.transport.frames import decode_frame, encode_frame

Link = tuple[str, str]


@dataclass(slots=True)
class NetworkOptions:
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    loss: float = 0.0
    duplicate: float = 0.0
    #: encode every envelope at send and decode it at delivery (the production wire codec)
    codec: bool = True
    #: directed link ``(src, dst)`` -> its own ``(min_delay_ms, max_delay_ms)``
    link_delays: dict = field(default_factory=dict)
    #: probability that a send also re-injects an old frame, much later
    replay: float = 0.0
    #: how many of the most recent frames a replay picks from
    replay_window: int = 256
    replay_min_delay_ms: int = 1_000
    replay_max_delay_ms: int = 10_000
    #: probability that a delivered copy has one bit flipped in transit (needs ``codec``)
    corrupt: float = 0.0

    def validate(self) -> "NetworkOptions":
        if not 0 <= self.min_delay_ms <= self.max_delay_ms:
            raise ValueError(f"need 0 <= min_delay_ms <= max_delay_ms, got {self.min_delay_ms}, {self.max_delay_ms}")
        for name in ("loss", "duplicate", "replay", "corrupt"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} is a probability, got {getattr(self, name)!r}")
        if self.corrupt and not self.codec:
            raise ValueError("corruption flips bits of the encoded frame: it needs codec=True")
        if not 0 <= self.replay_min_delay_ms <= self.replay_max_delay_ms or self.replay_window < 1:
            raise ValueError("need 0 <= replay_min_delay_ms <= replay_max_delay_ms and replay_window >= 1")
        for link, (lo, hi) in self.link_delays.items():
            if not 0 <= lo <= hi:
                raise ValueError(f"link {link}: need 0 <= min <= max, got {lo}, {hi}")
        return self


class SimEndpoint:
    def __init__(self, network: "SimNetwork", node_id: str, process=None) -> None:
        self.network = network
        self.node_id = node_id
        self.receiver = None
        self.closed = False
        #: the ``SimProcess`` behind the endpoint: while it is paused, arrivals wait for it
        self.process = process

    def set_receiver(self, receiver) -> None:
        self.receiver = receiver

    def send(self, envelope: Envelope) -> None:
        if not self.closed:
            proc = self.process
            if proc is not None and proc.paused:
                # paused inside the crank that sends (a slow sync): it leaves when the pause ends
                proc.hold(self.network._send, envelope)
            else:
                self.network._send(envelope)

    def close(self) -> None:
        self.closed = True


class SimNetwork:
    def __init__(self, scheduler, rng: random.Random, options: NetworkOptions | None = None) -> None:
        self.scheduler = scheduler
        self.rng = rng
        self.options = (options or NetworkOptions()).validate()
        self.endpoints: dict[str, SimEndpoint] = {}
        self.blocked: set[Link] = set()
        #: clogged link -> virtual time its clog ends; held messages per clogged link
        self.clogged: dict[Link, int] = {}
        self._held: dict[Link, list] = {}
        #: the most recent frames sent, ``(src, dst, payload)``, for replays
        self._recent: deque = deque(maxlen=self.options.replay_window)
        #: optional ``drop_if(envelope) -> bool``: a test's own message filter
        self.drop_if = None
        self.sent = 0
        self.delivered = 0
        self.dropped = 0
        self.replayed = 0
        #: copies damaged in transit, and how many of them the receiver's codec refused
        self.corrupted = 0
        self.rejected = 0

    def endpoint(self, node_id: str, process=None) -> SimEndpoint:
        ep = SimEndpoint(self, node_id, process)
        self.endpoints[node_id] = ep
        return ep

    def bind(self, node_id: str, process) -> None:
        """Tie ``node_id``'s endpoint to its ``SimProcess`` (arrivals wait while it is paused)."""
        self.endpoints[node_id].process = process

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

    def block(self, links: Iterable[Link]) -> None:
        """Block every directed link in ``links`` (a shape from ``dledger.sim.partitions``)."""
        self.blocked.update(links)

    def set_link(self, src: str, dst: str, min_delay_ms: int, max_delay_ms: int) -> None:
        """Give the directed link its own delay range (jitter: ``max - min``)."""
        if not 0 <= min_delay_ms <= max_delay_ms:
            raise ValueError(f"need 0 <= min <= max, got {min_delay_ms}, {max_delay_ms}")
        self.options.link_delays[(src, dst)] = (min_delay_ms, max_delay_ms)

    def clog(self, src: str, dst: str, ms: int) -> None:
        """Hold every message due on the link for ``ms`` from now, then release them in order."""
        until = self.scheduler.now + ms
        if until > self.clogged.get((src, dst), -1):
            self.clogged[(src, dst)] = until
            self._held.setdefault((src, dst), [])
            self.scheduler.call_at(until, self._clog_over, (src, dst), until)

    def unclog(self, src: str, dst: str) -> None:
        """Release the link's held messages now (in the order they were due)."""
        link = (src, dst)
        self.clogged.pop(link, None)
        now = self.scheduler.now
        for payload, damaged in self._held.pop(link, ()):
            self.scheduler.call_at(now, self._deliver, src, dst, payload, damaged)

    def _clog_over(self, link: Link, until: int) -> None:
        if self.clogged.get(link) == until:
            self.unclog(*link)

    def heal(self) -> None:
        """End every partition and every clog."""
        self.blocked.clear()
        for link in list(self.clogged):
            self.unclog(*link)

    def replay_envelope(self, env: Envelope, delay_ms: int) -> None:
        """Deliver a copy of ``env`` (one recorded earlier, e.g. through ``drop_if``) to its
        addressee ``delay_ms`` from now, as a replayed frame: through the codec, and dropped
        if the link is blocked or the addressee down at delivery."""
        self.replayed += 1
        payload = encode_frame(env) if self.options.codec else env
        self.scheduler.call_at(self.scheduler.now + delay_ms, self._deliver, env.src, env.dst, payload, False)

    # -- moving envelopes -----------------------------------------------------------------
    def _delay(self, src: str, dst: str) -> int:
        o = self.options
        lo, hi = o.link_delays.get((src, dst), (o.min_delay_ms, o.max_delay_ms)) if o.link_delays \
            else (o.min_delay_ms, o.max_delay_ms)
        return lo + self.rng.randrange(hi - lo + 1)

    def _send(self, env: Envelope) -> None:
        self.sent += 1
        o = self.options
        rng = self.rng
        src, dst = env.src, env.dst
        if o.replay:
            self._maybe_replay()
        if (src, dst) in self.blocked or (o.loss and rng.random() < o.loss) \
                or (self.drop_if is not None and self.drop_if(env)):
            self.dropped += 1
            return
        now = self.scheduler.now
        payload = encode_frame(env) if o.codec else env
        if o.replay:
            self._recent.append((src, dst, payload))
        self._schedule(now + self._delay(src, dst), src, dst, payload)
        if o.duplicate and rng.random() < o.duplicate:
            self._schedule(now + self._delay(src, dst), src, dst, payload)

    def _schedule(self, when: int, src: str, dst: str, payload: "bytes | Envelope") -> None:
        o = self.options
        damaged = False
        if o.corrupt and self.rng.random() < o.corrupt:
            payload, damaged = self._flip_bit(payload), True
            self.corrupted += 1
        self.scheduler.call_at(when, self._deliver, src, dst, payload, damaged)

    def _flip_bit(self, frame: bytes) -> bytes:
        damaged = bytearray(frame)
        damaged[self.rng.randrange(len(damaged))] ^= 1 << self.rng.randrange(8)
        return bytes(damaged)

    def _maybe_replay(self) -> None:
        o, rng = self.options, self.rng
        if self._recent and rng.random() < o.replay:
            src, dst, payload = self._recent[rng.randrange(len(self._recent))]
            delay = o.replay_min_delay_ms + rng.randrange(o.replay_max_delay_ms - o.replay_min_delay_ms + 1)
            self.replayed += 1
            self._schedule(self.scheduler.now + delay, src, dst, payload)

    def _deliver(self, src: str, dst: str, payload: "bytes | Envelope", damaged: bool = False) -> None:
        ep = self.endpoints.get(dst)
        if ep is None or ep.closed or ep.receiver is None or (src, dst) in self.blocked:
            self.dropped += 1
            return
        if self.clogged:
            until = self.clogged.get((src, dst))
            if until is not None:
                self._held[(src, dst)].append((payload, damaged))
                return
        if type(payload) is bytes:
            if damaged:
                try:
                    env = decode_frame(payload)
                except FrameError:
                    self.rejected += 1
                    self.dropped += 1
                    return
                raise AssertionError(f"a frame damaged in transit decoded as {env!r:.200}")
            env = decode_frame(payload)
        else:
            env = payload
        self.delivered += 1
        proc = ep.process
        if proc is not None and proc.paused:
            proc.hold(ep.receiver, env)
        else:
            ep.receiver(env)
