"""Membership: a group's configuration (its voters and learners), its log entry, its history.

A configuration names the **voters** (they vote, stand for election and count toward every
quorum: commit, check-quorum, the read lease) and the **learners** (they receive the log but
count toward nothing), each with the address the node that wrote it knew.

It changes one server at a time (the Raft dissertation's single-server changes, as etcd-raft
with learners): add a learner, promote a learner to voter, remove a member. Each change is a
log entry of its own kind, ``MAGIC_CONFIG_CHANGE`` (3), whose body is the *whole* new
configuration (``encode``, JSON: ``{"learners": {...}, "voters": {"n0": "host:port", ...}}``,
keys sorted). A node uses the latest configuration in its log, committed or not, from the
moment the entry is appended (leader or follower), and falls back to the one before when a
truncation removes it (``ConfigHistory``). Any two configurations one change apart share a
voter in every pair of their quorums, which is what makes a change safe without joint
consensus; a leader therefore proposes a change only when the one before is committed and it
has committed an entry of its own term (``core.membership_change``).

Below the log: the configuration at the log's start is the store's ``membership`` record
(``store.membership``), rewritten durably whenever a configuration entry commits (retention and
snapshots remove only committed entries, so the record always covers what they remove). A group
whose log never held a configuration entry uses the **bootstrap** configuration: the ``peers``
the node was started with, every one a voter (index -1), recorded the same way.

``Configuration`` is immutable; ``ConfigHistory`` holds the record and the entries above it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from dledger.entry import MAGIC_CONFIG_CHANGE
from dledger.protocol import peers_text, parse_peers_text

__all__ = ["Configuration", "ConfigHistory", "MembershipError", "MAGIC_CONFIG_CHANGE"]

#: the index of the bootstrap configuration (no log entry made it)
BOOTSTRAP_INDEX = -1


class MembershipError(ValueError):
    """A configuration that cannot be (bytes that do not decode, a member both voter and learner,
    no voter)."""


@dataclass(frozen=True, slots=True)
class Configuration:
    voters: dict[str, str]
    learners: dict[str, str] = field(default_factory=dict)
    #: the index of the log entry that made it (``BOOTSTRAP_INDEX``: the bootstrap peers)
    index: int = BOOTSTRAP_INDEX
    #: the term of that entry (-1: bootstrap)
    term: int = -1

    def __post_init__(self) -> None:
        both = set(self.voters) & set(self.learners)
        if both:
            raise MembershipError(f"{', '.join(sorted(both))} cannot be both voter and learner")
        if not self.voters:
            raise MembershipError("a configuration needs at least one voter")
        for node_id in (*self.voters, *self.learners):
            if not node_id or "-" in node_id or ";" in node_id:
                raise MembershipError(f"member id {node_id!r} is not valid (non-empty, no '-' nor ';')")

    # -- views ---------------------------------------------------------------------------------
    @property
    def members(self) -> dict[str, str]:
        """Every member, voters first, with its address."""
        return {**self.voters, **self.learners}

    def is_voter(self, node_id: str | None) -> bool:
        return node_id in self.voters

    def is_learner(self, node_id: str | None) -> bool:
        return node_id in self.learners

    def is_member(self, node_id: str | None) -> bool:
        return node_id in self.voters or node_id in self.learners

    def made_in(self, term: int) -> bool:
        """Whether the entry that made this configuration is of ``term`` (a change of that term)."""
        return self.term == term and self.index >= 0

    def same_members(self, other: "Configuration | None") -> bool:
        return other is not None and set(self.voters) == set(other.voters) \
            and set(self.learners) == set(other.learners)

    def describe(self) -> str:
        """``voters n0, n1, n2; learners n3`` (for log lines and errors)."""
        text = "voters " + ", ".join(sorted(self.voters))
        if self.learners:
            text += "; learners " + ", ".join(sorted(self.learners))
        return text

    # -- the single-server changes ---------------------------------------------------------------
    def with_learner(self, node_id: str, address: str) -> "Configuration":
        if self.is_member(node_id):
            raise MembershipError(f"{node_id} is already a member ({self.describe()})")
        return Configuration(dict(self.voters), {**self.learners, node_id: address})

    def promoted(self, node_id: str) -> "Configuration":
        if not self.is_learner(node_id):
            what = "already a voter" if self.is_voter(node_id) else "not a member"
            raise MembershipError(f"{node_id} is {what}: only a learner can be promoted ({self.describe()})")
        learners = dict(self.learners)
        address = learners.pop(node_id)
        return Configuration({**self.voters, node_id: address}, learners)

    def without(self, node_id: str) -> "Configuration":
        if not self.is_member(node_id):
            raise MembershipError(f"{node_id} is not a member ({self.describe()})")
        voters = {k: v for k, v in self.voters.items() if k != node_id}
        if not voters:
            raise MembershipError(f"{node_id} is the last voter: a group keeps at least one")
        return Configuration(voters, {k: v for k, v in self.learners.items() if k != node_id})

    def at(self, index: int, term: int) -> "Configuration":
        """The same members, as made by the entry at ``index`` of ``term``."""
        return Configuration(self.voters, self.learners, index, term)

    # -- bytes -----------------------------------------------------------------------------------
    def encode(self) -> bytes:
        """The body of a configuration entry (JSON, keys sorted: byte-identical everywhere)."""
        return json.dumps({"learners": self.learners, "voters": self.voters}, sort_keys=True,
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes, index: int = BOOTSTRAP_INDEX, term: int = -1) -> "Configuration":
        try:
            obj = json.loads(bytes(body))
            voters, learners = obj["voters"], obj.get("learners", {})
            ok = isinstance(voters, dict) and isinstance(learners, dict) and all(
                isinstance(k, str) and isinstance(v, str) for d in (voters, learners) for k, v in d.items())
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise MembershipError(f"configuration entry {index} does not decode: {exc}") from None
        if not ok:
            raise MembershipError(f"configuration entry {index} does not decode: members must map ids to addresses")
        return cls(dict(voters), dict(learners), index, term)

    # -- the store's record (``store.membership``) --------------------------------------------------
    def record(self) -> list[tuple[str, str]]:
        return [("index", str(self.index)), ("term", str(self.term)), ("voters", peers_text(self.voters)),
                ("learners", peers_text(self.learners))]

    @classmethod
    def from_record(cls, props: dict[str, str]) -> "Configuration":
        try:
            return cls(parse_peers_text(props["voters"]) if props.get("voters") else {},
                       parse_peers_text(props["learners"]) if props.get("learners") else {},
                       int(props["index"]), int(props.get("term", "-1")))
        except (KeyError, ValueError) as exc:
            raise MembershipError(f"the membership record does not read: {exc}") from None


class ConfigHistory:
    """The configuration at the log's start (``base``) and the configuration entries above it,
    in index order. ``latest`` is the one in force."""

    __slots__ = ("base", "entries")

    def __init__(self, base: Configuration | None) -> None:
        self.base = base
        self.entries: list[Configuration] = []

    @property
    def latest(self) -> Configuration | None:
        return self.entries[-1] if self.entries else self.base

    def appended(self, config: Configuration) -> None:
        """A configuration entry was appended at ``config.index`` (any entries at or above it are
        gone: the log was cut there first)."""
        self.cut(config.index)
        self.entries.append(config)

    def cut(self, index: int) -> bool:
        """The log lost its entries from ``index`` on: forget theirs. True when the latest changed."""
        entries = self.entries
        if not entries or entries[-1].index < index:
            return False
        while entries and entries[-1].index >= index:
            entries.pop()
        return True

    def at(self, index: int) -> Configuration | None:
        """The configuration in force at log index ``index`` (the latest made at or below it)."""
        for config in reversed(self.entries):
            if config.index <= index:
                return config
        return self.base

    def committed(self, index: int) -> Configuration | None:
        """The entries at or below ``index`` committed: the newest becomes the base (returned
        when it changed, for the store's record), the older ones are dropped."""
        entries = self.entries
        newest = None
        while entries and entries[0].index <= index:
            newest = entries.pop(0)
        if newest is not None:
            self.base = newest
        return newest

    def uncommitted(self, committed_index: int) -> bool:
        """Whether a configuration entry above ``committed_index`` is in the log."""
        return bool(self.entries) and self.entries[-1].index > committed_index
