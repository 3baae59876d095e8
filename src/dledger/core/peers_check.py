"""PeersCheck: members that disagree on who the group's members are refuse each other, loudly.

Every vote and heartbeat request carries the sender's members (``VoteRequest.members``,
``HeartBeatRequest.members``, written by ``protocol.peers_text``: ``id-address`` pairs sorted by
id). A receiver whose own members differ (a typo in one port of one node's ``--peers``, a member
missing from one list) refuses the request with PEERS_MISMATCH and puts its own members in the
answer, so that both sides know both lists. Each side logs one ERROR line per peer per minute
naming the entries that differ:

    n2: refusing n0: its peers differ from this node's: n1 is localhost:20912 here but
    localhost:20921 at n0; a group's members must give every node the same --peers

A refused request is answered as a vote or a heartbeat that was not given (a refused vote
counts as no answer); a mismatched member therefore never helps elect a leader. A request that
carries no members (empty: a peer that does not send them) is not checked.

State: this node's id and members, and when it last logged a mismatch with each peer (its time
and the peer's members are also what ``core.waiting`` names). Pure otherwise: ``refusal``
decides, ``refused_by`` records an answer; both only log.
"""

from __future__ import annotations

import logging

from dledger.protocol import parse_peers_text

log = logging.getLogger(__name__)

#: a mismatch with one peer is logged at most once per this many milliseconds
MISMATCH_LOG_INTERVAL_MS = 60_000


def differences(mine: dict[str, str], theirs: dict[str, str], who: str) -> str:
    """The entries of two member lists that differ, in words ("n1 is A here but B at n0", "n3
    is missing here", ...), sorted by member id."""
    out = []
    for node_id in sorted(set(mine) | set(theirs)):
        a, b = mine.get(node_id), theirs.get(node_id)
        if a == b:
            continue
        if a is None:
            out.append(f"{node_id} ({b}) is not a member here but is at {who}")
        elif b is None:
            out.append(f"{node_id} ({a}) is a member here but not at {who}")
        else:
            out.append(f"{node_id} is {a} here but {b} at {who}")
    return "; ".join(out)


class PeersCheck:
    def __init__(self, member_state) -> None:
        self.self_id = member_state.self_id
        self.peer_map = dict(member_state.peer_map)
        #: what this node's requests carry (``MemberState.peers_text``)
        self.text = member_state.peers_text
        #: peer -> (its members, as it sent them, when the mismatch was last logged)
        self.mismatched: dict[str, tuple[str, int]] = {}

    def matches(self, theirs: str) -> bool:
        """Whether members a peer sent agree with this node's (empty: not sent, not checked)."""
        return not theirs or theirs == self.text

    def agreed(self, peer: str) -> None:
        """``peer`` sent members that agree (it was fixed and restarted, say)."""
        if self.mismatched:
            self.mismatched.pop(peer, None)

    def refusal(self, now: int, peer: str, theirs: str) -> None:
        """``peer`` sent a request whose members differ: log it (rate-limited)."""
        self._note(now, peer, theirs, f"refusing {peer}'s requests")

    def refused_by(self, now: int, peer: str, theirs: str) -> None:
        """``peer`` refused this node's request with PEERS_MISMATCH, naming its members."""
        self._note(now, peer, theirs, f"{peer} refuses this node's requests")

    def _note(self, now: int, peer: str, theirs: str, what: str) -> None:
        last = self.mismatched.get(peer)
        if last is not None and last[0] == theirs and now - last[1] < MISMATCH_LOG_INTERVAL_MS:
            return
        self.mismatched[peer] = (theirs, now)
        log.error("%s: %s: its peers differ from this node's: %s; every member of a group must be given "
                  "the same --peers (this node has %s)", self.self_id, what,
                  differences(self.peer_map, parse_peers_text(theirs), peer) or "(the same entries, written "
                  "differently)", self.text)

    def summary(self) -> str:
        """The peers whose members differ, for ``core.waiting`` (empty: none)."""
        if not self.mismatched:
            return ""
        return "; ".join(f"{peer} has other peers ({differences(self.peer_map, parse_peers_text(t), peer)})"
                         for peer, (t, _at) in sorted(self.mismatched.items()))
