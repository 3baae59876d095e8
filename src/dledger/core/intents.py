"""Intents: what a component decided should happen, as data.

Components of the core hold state and make decisions over it; they never call each other nor
the node. What one decides that reaches beyond its own state (a message to send, a client to
answer, a role to take, a fact another component must hear) it returns as an intent, and the
node applies the intents in the order they were returned (``Node._apply``), each one fully
(whatever its application returns is applied first) before the next: exactly the order the
calls would have run in, had the component made them itself.

Leaves leave the core through the ``Ready``:

- ``Send(peer, msg, ctx)``: a request of this node; its answer, or ``None`` when it went
  unanswered for ``rpc_timeout_ms``, is handed back with ``ctx`` to the component that owns
  requests of its type (``Node._answered``);
- ``Reply(dst, request_id, msg)``: an answer to a peer's request, given later than the request
  (a parked push);
- ``Complete(token, response, result)``, ``Fail(token, code)``, ``ReadDone(token, code,
  index)``: a client operation finished (a token standing for a request that came over the
  network is answered over it).

The others are applied by another component, and may return intents in turn:

- roles (applied by ``core.leader_elector``): ``StepDown(term, event)`` (become, or stay,
  candidate knowing ``term``), ``JoinTerm(term, event)`` (the same, campaigning in ``term`` at
  once), ``Follow(leader, term)``, ``Won(term)``, ``StandAside()``, ``TakeLeadership(target,
  token)``;
- facts for another part: ``HeardLeader()`` (for the heartbeats), ``CommitHint(term, index)``
  (for the entry handler), ``PeerRecovering(peer, following, incarnation)`` (for the pusher),
  ``ReadsConfirmed(sent_at)`` and ``FailReads(code)`` (for the reads), ``TailCut(index)``
  (for the pusher, after the damaged tail cut the log).

Which part applies each one is written in one place, ``Node._effect``.

Every intent has a rank (``RANK``): applying one returns only intents of a lower rank, which
``Node._apply`` asserts. So applying a list always ends: each step replaces one intent by
intents of lower rank only, and no such sequence of multisets is infinite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dledger.core.member_state import RoleEvent


# -- leaves: what leaves the core ---------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class Send:
    """Send request ``msg`` to ``peer``; its answer goes back, with ``ctx``, to its owner."""

    peer: str
    msg: Any
    ctx: Any = None


@dataclass(slots=True, frozen=True)
class Reply:
    """Answer request ``request_id`` of ``dst`` with ``msg``."""

    dst: str
    request_id: int
    msg: Any


@dataclass(slots=True, frozen=True)
class Complete:
    """Client operation ``token`` finished with ``response`` (and the state machine's ``result``)."""

    token: Any
    response: Any
    result: Any = None


@dataclass(slots=True, frozen=True)
class Fail:
    """Client operation ``token`` (an append) failed with ``code``."""

    token: Any
    code: int


@dataclass(slots=True, frozen=True)
class ReadDone:
    """Read ``token`` finished with ``code``, safe at ``index`` (-1 when it failed)."""

    token: Any
    code: int
    index: int


# -- roles -----------------------------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class StepDown:
    """Become (or stay) candidate, knowing ``term``, because of ``event``; vote after a delay."""

    term: int
    event: RoleEvent
    #: the details of the cause, for the log line (``n1 answered with term 5``)
    why: str = ""


@dataclass(slots=True, frozen=True)
class JoinTerm:
    """A higher ``term`` was seen (or a transferee stands in it): become its candidate and
    campaign in it at once."""

    term: int
    event: RoleEvent
    #: the details of the cause, for the log line
    why: str = ""


@dataclass(slots=True, frozen=True)
class Follow:
    """A leader of this node's term spoke: follow ``leader``."""

    leader: str
    term: int


@dataclass(slots=True, frozen=True)
class Won:
    """The vote round of ``term`` passed: lead it."""

    term: int
    #: who voted for and against, for the log line (``VoteTally.votes_text``)
    votes: str = ""


@dataclass(slots=True, frozen=True)
class StandAside:
    """A leader stuck on a damaged entry steps down and lets the others stand first."""


@dataclass(slots=True, frozen=True)
class TakeLeadership:
    """The transferee caught up: stand in ``target`` at once, and answer ``token`` (the old
    leader's request) when the take-over is decided."""

    target: int
    token: Any


# -- facts for another component ---------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class HeardLeader:
    """The leader this node follows spoke (a heartbeat or an accepted push)."""


@dataclass(slots=True, frozen=True)
class CommitHint:
    """The leader of ``term`` says ``index`` is committed."""

    term: int
    index: int


@dataclass(slots=True, frozen=True)
class PeerRecovering:
    """``peer`` (``incarnation``) answered ``recovering``; ``following``: with SUCCESS."""

    peer: str
    following: bool
    incarnation: int


@dataclass(slots=True, frozen=True)
class ReadsConfirmed:
    """A quorum confirmed this leadership as of ``sent_at``: the reads it covers complete."""

    sent_at: int


@dataclass(slots=True, frozen=True)
class FailReads:
    """Every waiting read fails with ``code`` (this node stops leading)."""

    code: int


@dataclass(slots=True, frozen=True)
class TailCut:
    """This leader cut its own log at damaged entry ``index`` (never committed)."""

    index: int


#: what applying an intent may return: only intents of a lower rank (``Node._apply`` checks)
RANK: dict[type, int] = {
    Send: 0, Reply: 0, Complete: 0, Fail: 0, ReadDone: 0,
    ReadsConfirmed: 1, FailReads: 1, CommitHint: 1, HeardLeader: 1, PeerRecovering: 1, TailCut: 1,
    StepDown: 1, JoinTerm: 1, Follow: 1, StandAside: 1, TakeLeadership: 1,
    Won: 2,
}

#: no intents (a shared empty result)
NONE: tuple = ()
