"""Waiting: why a node knows no leader, said every few seconds and on request.

A node without a leader for ``WAITING_LOG_INTERVAL_MS`` logs one WARNING line naming what it
waits for and what would end the wait, and again at most once per interval while it lasts:

    n0: no leader for 5.0 s (CANDIDATE in term 0): its store is new (FRESH) and it has not
    heard from n2 (localhost:20913) ...; a brand-new group starts with --bootstrap on every member

The same text (without the prefix) is what ``dledger status`` shows (``MetadataResponse.waiting``)
and what a client's "no leader" error quotes. The reasons, first match wins:

- the store failed: the node stands and votes for no one until restarted;
- recovery (``core.rejoin``) has not relearnt the term: an empty (``FRESH``) or term-less
  (``TERM_LOST``) member waits to hear from the other members before it votes or stands, so
  that a wiped member cannot help elect a leader that lacks committed entries; it names the
  members it has not heard from, their addresses, and ``--bootstrap`` (a brand-new group's
  members start knowing that nothing was ever written, as etcd's ``--initial-cluster-state
  new``);
- the last vote round: the votes it got and needs, who voted for and against (and why), who did
  not answer, which voters are recovering, which peers' ``--peers`` differ (``core.peers_check``).

State: member state, recovery and the peers check (read, never changed), and the time the wait
began and was last logged. Only logs; changes nothing else.
"""

from __future__ import annotations

import logging

from dledger.core.member_state import MemberState, Role
from dledger.core.quorum import quorum_size
from dledger.store.suspect import SuspectReason

log = logging.getLogger(__name__)

#: a node without a leader logs why after this long, and then at most once per this long
WAITING_LOG_INTERVAL_MS = 5_000

#: the remedy a new group needs, as the WARNING and ``dledger status`` say it
BOOTSTRAP_HINT = ("a brand-new group starts with --bootstrap on every member (as etcd's "
                  "--initial-cluster-state new)")


def names(ids, peer_map: dict[str, str] | None = None) -> str:
    """``n1, n2`` (with their addresses when ``peer_map`` is given: ``n1 (h:1), n2 (h:2)``)."""
    ids = sorted(ids)
    if peer_map is None:
        return ", ".join(ids)
    return ", ".join(f"{i} ({peer_map.get(i, '?')})" for i in ids)


class Waiting:
    def __init__(self, member_state: MemberState, recovery, peers_check, config, *, now_ms: int) -> None:
        self.member_state = member_state
        self.recovery = recovery
        self.peers_check = peers_check
        self.cfg = config
        #: since when this node knows no leader (None: it knows one)
        self.since: int | None = now_ms
        self.last_logged: int | None = None

    def maintain(self, now: int, tally) -> None:
        """Log the reason when this node has known no leader for an interval, at most once per
        interval; ``tally``: its last finished vote round (``vote.VoteTally``, or None)."""
        member = self.member_state
        if member.leader_id is not None or not self.cfg.enable_leader_elector:
            self.since = None
            return
        if self.since is None:
            self.since = now
            return
        if now - self.since < WAITING_LOG_INTERVAL_MS or \
                self.last_logged is not None and now - self.last_logged < WAITING_LOG_INTERVAL_MS:
            return
        self.last_logged = now
        log.warning("%s: no leader for %.1f s (%s in term %d): %s", member.self_id, (now - self.since) / 1000,
                    member.role.value, member.curr_term, self.reason(tally))

    def reason(self, tally) -> str:
        """Why this node knows no leader (empty when it knows one)."""
        member, recovery = self.member_state, self.recovery
        if member.leader_id is not None:
            return ""
        mismatch = self.peers_check.summary()
        tail = f"; {mismatch}" if mismatch else ""
        if recovery.failed:
            return (f"its store failed ({member.store.failed}): it neither votes nor stands until it is "
                    f"restarted on a sound disk{tail}")
        if member.configuration is None and getattr(self.cfg, "join", False):
            return (f"it joins the group and is not a member yet: it waits to be added (dledger member add "
                    f"--id {member.self_id} --address <its host:port> ...); it votes and stands for nothing "
                    f"until the leader's log makes it a member{tail}")
        if recovery.recovering and not recovery.term_known:
            return self._relearning() + tail
        if member.configuration is not None and not member.is_voter() and not member.needed_until_committed():
            what = "a learner" if member.configuration.is_learner(member.self_id) else "not a member"
            return (f"it is {what} of the configuration of entry {member.configuration.index} "
                    f"({member.configuration.describe()}): it stands for nothing; it follows the leader "
                    f"that pushes to it{tail}")
        if member.knows_removed():
            return (f"it was removed from the group (a voter named the configuration of entry "
                    f"{member.removed_in}, which leaves it out): it stands for election no more{tail}")
        if member.role is Role.CANDIDATE and tally is not None and tally.term == member.curr_term:
            return self._round(tally) + tail
        if member.role is Role.CANDIDATE:
            return "no vote round has finished in this term yet" + tail
        return f"{member.role.value}" + tail

    def _relearning(self) -> str:
        member, recovery = self.member_state, self.recovery
        others = member.remote_peer_ids
        heard = [p for p in others if p in recovery.answers]
        missing = [p for p in others if p not in recovery.answers]
        n = len(others) + 1
        enough = n - quorum_size(n) + 1
        partial = "" if enough >= len(others) else f", or {enough} of them after an election timeout"
        heard_text = f"heard from {names(heard)} but not" if heard else "heard from no other member: not"
        if recovery.reason is SuspectReason.FRESH:
            what = "its store is new or wiped (FRESH)"
            why = ("an empty member votes and stands only once every other member answered it" + partial +
                   ", so that a wiped member cannot help elect a leader that lacks committed entries")
            remedy = f"{BOOTSTRAP_HINT}; else start {names(missing)} or correct the address(es) this node has"
        else:
            what = f"it lost its term and vote ({recovery.reason.value if recovery.reason else '-'})"
            why = "it relearns its term from the other members before it votes or stands" + partial
            remedy = f"start {names(missing)} or correct the address(es) this node has"
        return f"{what} and it has {heard_text} from {names(missing, member.addresses)}: {why}; {remedy}"

    def _round(self, tally) -> str:
        member = self.member_state
        majority = member.majority
        need = len(majority) if tally.unanimous else quorum_size(len(majority))
        text = (f"its last vote round (term {tally.term}{', unanimous' if tally.unanimous else ''}) got "
                f"{tally.accepted} of the {need} votes it needs: {tally.votes_text()}")
        silent = [p for p, r in tally.results.items() if r == "no answer" and p != member.self_id]
        if silent:
            text += (f"; check that {names(silent, member.addresses)} "
                     f"{'runs at that address' if len(silent) == 1 else 'run at those addresses'}")
        recovering = sorted(tally.recovering_voters)
        if recovering:
            text += (f"; {names(recovering)} "
                     + ("is recovering (its store may have lost what it acknowledged): it votes once every "
                        "member answered it or a leader caught it up" if len(recovering) == 1 else
                        "are recovering (their stores may have lost what they acknowledged): they vote once "
                        "every member answered them or a leader caught them up")
                     + f"; {BOOTSTRAP_HINT}")
        return text
