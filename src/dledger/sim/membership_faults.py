"""MembershipFaults: the swarm's membership changes (``--membership``), mixed with every other fault.

With ``SwarmOptions.membership`` each nemesis strike may also change the group, through its
leader, as an operator would (``sim/cluster_membership.py``):

- ``add``: a new node starts with ``join`` and is added in one step (learner, then promoted
  once caught up: ``add_member``);
- ``learner``: a new node is added as a learner only (it may stay one; a later ``promote`` may
  make it a voter; a crash may keep it from ever catching up);
- ``promote``: a learner of the leader's configuration is promoted;
- ``remove``: a member other than the leader is removed;
- ``remove_leader``: the leader is asked to remove itself (it hands leadership over first);
- ``wipe``: a voter's disk is lost and the node restarts empty, under its old id (it must
  vote for nothing until the leader taught it; a wipe happens only while no node is down or
  recovering, and on file stores only without the storage faults whose copies the fault atlas
  counts on, and in ``page_cache`` durability only on a power victim: what a wipe loses stays
  within what the mode promises to survive);
- ``replace``: the operator procedure for a lost machine: its disk is wiped, it is removed, and
  a new node is added in its place.

The group keeps 3 to 5 voters (a removal only above 3, an addition only below 5) and at most 8
nodes. Changes the leader refuses (one at a time, no leader) are simply refused: the seed goes
on. Every change's future joins the swarm's calls, which must all end in the liveness phase.
"""

from __future__ import annotations

import random
from concurrent.futures import Future

#: membership actions (``SwarmOptions.membership_mix`` holds one weight per action, in this order)
MEMBERSHIP_ACTIONS = ("add", "learner", "promote", "remove", "remove_leader", "wipe", "replace")
MIN_VOTERS, MAX_VOTERS, MAX_NODES = 3, 5, 8


class MembershipFaults:
    def __init__(self, opts) -> None:
        self.opts = opts
        self.rng = random.Random(f"swarm-membership/{opts.seed}/{opts.nodes}/{opts.durability}/{opts.store}")
        self.counts = {a: 0 for a in MEMBERSHIP_ACTIONS}
        self.futures: list[Future] = []
        #: the steps of a replacement still to do: (what, node)
        self.plan: list[tuple[str, str]] = []
        self._waiting: Future | None = None
        self._last: tuple[str, str] = ("", "")
        self._attempts = 0
        self._next_id = opts.nodes

    # -- the swarm's hooks -------------------------------------------------------------------
    def strike(self, c) -> None:
        """After a nemesis strike: maybe one change (or the next step of a replacement)."""
        if self.plan:
            if self._waiting is None or self._waiting.done():
                if self._removal_failed() and self._attempts < 5:
                    self._attempts += 1
                    self.plan.insert(0, self._last)
                self._step(c, *self.plan.pop(0))
            return
        if self.rng.random() >= self.opts.membership_rate:
            return
        weights = dict(zip(MEMBERSHIP_ACTIONS, self.opts.membership_mix))
        action = self.rng.choices(MEMBERSHIP_ACTIONS, [weights[a] for a in MEMBERSHIP_ACTIONS])[0]
        if getattr(self, f"_{action}")(c):
            self.counts[action] += 1

    def config_view(self, c) -> tuple[list[str], list[str]]:
        """(voters, learners) of the newest configuration a live node holds."""
        best = None
        for node_id in c.live():
            config = c.servers[node_id].node.member_state.configuration
            if config is not None and (best is None or config.index > best.index):
                best = config
        return (sorted(best.voters), sorted(best.learners)) if best is not None else (list(c.ids), [])

    # -- the actions ---------------------------------------------------------------------------
    def _track(self, f: Future) -> Future:
        self.futures.append(f)
        return f

    def _new_node(self, c) -> str | None:
        if len(c.ids) >= MAX_NODES:
            return None
        node_id = f"n{self._next_id}"
        self._next_id += 1
        c.add_node(node_id)
        return node_id

    def _add(self, c) -> bool:
        voters, learners = self.config_view(c)
        if len(voters) >= MAX_VOTERS or c.leader() is None:
            return False
        node_id = self._new_node(c)
        if node_id is None:
            return False
        self._track(c.add_member(node_id, timeout_ms=3_000))
        return True

    def _learner(self, c) -> bool:
        if c.leader() is None:
            return False
        node_id = self._new_node(c)
        if node_id is None:
            return False
        self._track(c.add_learner(node_id))
        return True

    def _promote(self, c) -> bool:
        voters, learners = self.config_view(c)
        if not learners or len(voters) >= MAX_VOTERS:
            return False
        self._track(c.promote(self.rng.choice(learners)))
        return True

    def _remove(self, c) -> bool:
        voters, learners = self.config_view(c)
        leader = c.leader()
        choices = [n for n in learners] + ([n for n in voters if n != leader] if len(voters) > MIN_VOTERS else [])
        if not choices or leader is None:
            return False
        self._track(c.remove_member(self.rng.choice(choices)))
        return True

    def _remove_leader(self, c) -> bool:
        voters, _learners = self.config_view(c)
        leader = c.leader()
        if leader is None or len(voters) <= MIN_VOTERS:
            return False
        self._track(c.remove_member(leader))
        return True

    def _may_wipe(self, c, node_id: str) -> bool:
        opts = self.opts
        if c.crashed or any(c.servers[n].node.recovery.recovering for n in c.live()):
            return False
        if opts.store == "file" and (opts.bit_flip or opts.lost_write or opts.misdirect or opts.snapshots):
            return False
        return opts.durability != "page_cache" or opts.store != "file" or node_id in opts.power_victims

    def _wipe(self, c) -> bool:
        voters, _learners = self.config_view(c)
        leader = c.leader()
        choices = [n for n in voters if n != leader and n in c.servers and self._may_wipe(c, n)]
        if not choices:
            return False
        node_id = self.rng.choice(choices)
        c.wipe(node_id)
        c.restart(node_id)
        return True

    def _replace(self, c) -> bool:
        voters, _learners = self.config_view(c)
        leader = c.leader()
        choices = [n for n in voters if n != leader and n in c.servers and self._may_wipe(c, n)]
        if not choices or len(c.ids) >= MAX_NODES:
            return False
        lost = self.rng.choice(choices)
        c.wipe(lost)                               # the machine is gone: it never comes back
        c.retired.add(lost)
        self.plan = [("remove", lost), ("add", "")]
        self._attempts = 0
        self._step(c, *self.plan.pop(0))
        return True

    def _removal_failed(self) -> bool:
        """The replacement's removal was refused (asked of no leader, one change at a time, the
        leader moving): it is asked again."""
        f = self._waiting
        if self._last[0] != "remove" or f is None:
            return False
        if f.exception() is not None:
            return True
        return f.result().code not in (200, 401)       # SUCCESS, or UNKNOWN_MEMBER: out already

    def _step(self, c, what: str, node_id: str) -> None:
        self._last = (what, node_id)
        if what == "remove":
            self._waiting = self._track(c.remove_member(node_id))
        else:
            new = self._new_node(c)
            if new is not None:
                self._waiting = self._track(c.add_member(new, timeout_ms=3_000))
