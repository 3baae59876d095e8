"""PeersCheck: members that disagree on who the group's members are refuse each other, loudly.

Every vote and heartbeat request carries the sender's members (``VoteRequest.members``,
``HeartBeatRequest.members``, written by ``protocol.peers_text``: ``id-address`` pairs sorted by
id). A receiver whose own member *ids* differ (a member missing from one list, an id misspelt)
refuses the request with PEERS_MISMATCH and puts its own members in the answer, so that both
sides know both lists. Each side logs one ERROR line per peer per minute naming the entries
that differ:

    n2: refusing n0's requests: its peers differ from this node's: n3 (127.0.0.1:20912) is a
    member here but not at n0; n1 (127.0.0.1:20912) is not a member here but is at n0; ...

Addresses may differ between members and are not compared: one member may reach another
through a proxy, a NAT or another name (the proxies of ``tests/transport/test_tcp_processes_faults.py``
give every node its own addresses for the others). A wrong address is found otherwise: the
member behind it never answers, and ``core.waiting`` names it with the address this node uses.

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
    """The members of one list that the other lacks, in words ("n3 (A) is a member here but not
    at n0", ...), sorted by member id (addresses may differ: they are not compared)."""
    out = []
    for node_id in sorted(set(mine) ^ set(theirs)):
        if node_id in theirs:
            out.append(f"{node_id} ({theirs[node_id]}) is not a member here but is at {who}")
        else:
            out.append(f"{node_id} ({mine[node_id]}) is a member here but not at {who}")
    return "; ".join(out)


class PeersCheck:
    def __init__(self, member_state) -> None:
        self.self_id = member_state.self_id
        self.member_state = member_state
        #: peer -> (its members, as it sent them, when the mismatch was last logged)
        self.mismatched: dict[str, tuple[str, int]] = {}
        self._ids = frozenset(member_state.peer_map)
        self._text = member_state.peers_text
        #: members texts seen, and whether their ids agree (a peer sends the same text each time)
        self._seen: dict[str, bool] = {}

    @property
    def text(self) -> str:
        """What this node's requests carry (``MemberState.peers_text``: empty once its
        configuration comes from the log, which decides membership from then on)."""
        return self.member_state.peers_text

    @property
    def peer_map(self) -> dict[str, str]:
        return self.member_state.peer_map

    def matches(self, theirs: str) -> bool:
        """Whether the member ids a peer sent agree with this node's (empty on either side: not
        checked; addresses are not compared, see the module docstring)."""
        mine = self.member_state.peers_text
        if not theirs or not mine or theirs == mine:
            return True
        if mine is not self._text:
            self._text, self._ids = mine, frozenset(self.member_state.peer_map)
            self._seen.clear()
        ok = self._seen.get(theirs)
        if ok is None:
            if len(self._seen) >= 64:
                self._seen.clear()
            ok = self._seen[theirs] = frozenset(parse_peers_text(theirs)) == self._ids
        return ok

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
                  differences(self.peer_map, parse_peers_text(theirs), peer) or "(the same members, written "
                  "differently)", self.text)

    def summary(self) -> str:
        """The peers whose members differ, for ``core.waiting`` (empty: none)."""
        if not self.mismatched:
            return ""
        return "; ".join(f"{peer} has other peers ({differences(self.peer_map, parse_peers_text(t), peer)})"
                         for peer, (t, _at) in sorted(self.mismatched.items()))
