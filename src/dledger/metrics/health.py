"""Health of the nodes an endpoint serves: what ``/health`` (live) and ``/ready`` answer.

- live: the process answers, and none of its nodes halted (a node halts when its disk fails,
  and stays down until its process restarts: ``DLedgerServer.halted``). A process that runs
  no node yet is live;
- ready: every node asked about (every node of the endpoint, or those of one group) is
  started, not halted, not recovering (a store that may have lost what it acknowledged
  counts toward no quorum until it caught up from a leader), knows the group's leader, and
  its commit index is at most ``max_lag`` entries behind the commit index its leader last
  announced (a follower's commit index only counts entries it holds and verified against
  that leader, so the difference is what it still has to receive). A leader is never
  behind itself. No node asked about: not ready.

Each check gives ``None`` (healthy) or one line naming the node and the reason. Everything is
read from the scraping thread without a lock, as the gauges are (``metrics.collector``): a
reading may mix values a moment apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from dledger.core import Role
from dledger.metrics.observer import NodeMetrics

#: entries a ready node may trail its leader's commit index by (``--ready-max-lag``)
DEFAULT_READY_MAX_LAG = 1000


def _name(m: NodeMetrics) -> str:
    return f"{m.group}/{m.node_id}"


def halted(m: NodeMetrics) -> str | None:
    """Why ``m``'s node halted, or None."""
    server = m.server
    reason = server.halted if server is not None else None
    return None if reason is None else f"{_name(m)} halted: {reason}"


def behind(m: NodeMetrics) -> int:
    """Entries the node's commit index trails the commit index its leader announced in the
    node's current term (0 for a leader, or before an announcement of this term arrived)."""
    node = m.server.node
    member = node.member_state
    if member.role is Role.LEADER:
        return 0
    term, announced = m.leader_commit
    if term != member.curr_term:
        return 0
    return max(0, announced - member.committed_index)


def not_ready(m: NodeMetrics, max_lag: int) -> str | None:
    """Why ``m``'s node is not ready, or None when it is."""
    server = m.server
    name = _name(m)
    if server is None:                   # attached, never started
        return f"{name} is not running"
    why = halted(m)
    if why is not None:
        return why
    node, store = server.node, server.store
    if not server.started or node is None or store is None:
        return f"{name} is not running"
    suspect = getattr(store, "suspect", None)
    if suspect is not None:
        reason = getattr(suspect, "value", suspect)
        return (f"{name} is recovering ({reason}): it counts toward no quorum until it has caught up "
                f"from a leader")
    member = node.member_state
    if member.leader_id is None:
        return f"{name} knows no leader ({member.role.value} in term {member.curr_term})"
    lag = behind(m)
    if lag > max_lag:
        return (f"{name} is {lag} entries behind the commit index of its leader {member.leader_id} "
                f"(ready within {max_lag})")
    return None


def summary(m: NodeMetrics) -> str:
    """One ready node in a few words: ``g/n0 FOLLOWER of n1 in term 3, 0 behind``."""
    member = m.server.node.member_state
    role = member.role
    who = "LEADER" if role is Role.LEADER else f"{role.value} of {member.leader_id}"
    return f"{_name(m)} {who} in term {member.curr_term}, {behind(m)} behind"


def liveness(nodes: Iterable[NodeMetrics]) -> tuple[bool, str]:
    """``(live, line)`` for ``/health``."""
    for m in nodes:
        why = halted(m)
        if why is not None:
            return False, why
    return True, "live"


def readiness(nodes: Iterable[NodeMetrics], max_lag: int, group: str | None = None) -> tuple[bool, str]:
    """``(ready, line)`` for ``/ready``: every node (of ``group`` when given) is ready."""
    asked = [m for m in nodes if group is None or m.group == group]
    if not asked:
        return False, f"no node of group {group!r} is served here" if group is not None else "no node is served here"
    for m in asked:
        why = not_ready(m, max_lag)
        if why is not None:
            return False, why
    return True, "ready: " + "; ".join(summary(m) for m in asked)


__all__ = ["DEFAULT_READY_MAX_LAG", "behind", "liveness", "not_ready", "readiness"]
