"""Membership changes in the simulator: ``Cluster`` methods (a mixin) to add a node, change the
group's members through its leader, and wipe a node's disk.

- ``add_node(id)`` starts a new node as ``dledger node --join`` does: an empty store, its
  ``peers`` the current members and itself, no configuration of its own until the leader's log
  makes it a member;
- ``add_learner(id)``, ``promote(id)``, ``remove_member(id)``, ``add_member(id)`` ask the
  current leader (or ``via``) as ``DLedgerServer``'s methods of those names do, and return
  their futures (a failed future when no leader is known);
- ``wipe(id)`` kills the node and erases its store (a machine whose disk was lost); ``restart``
  then starts it empty (without ``bootstrap``: it votes for nothing until it learns its
  configuration from the leader). A node in ``retired`` (a machine gone for good) is never
  restarted by the swarm.
"""

from __future__ import annotations

import shutil
from concurrent.futures import Future

from dledger.core import Role
from dledger.errors import DLedgerError
from dledger.sim.disk import PowerLoss
from dledger.store import DLedgerMemoryStore


class MembershipOps:
    def address_of(self, node_id: str) -> str:
        return f"127.0.0.1:{20911 + self._port_of(node_id)}"

    def _port_of(self, node_id: str) -> int:
        digits = "".join(ch for ch in node_id if ch.isdigit())
        return int(digits) if digits else len(self.ids)

    def add_node(self, node_id: str):
        """Start a new node ``node_id`` that joins the group (it waits to be added)."""
        if node_id in self.ids:
            raise ValueError(f"{node_id} is already a node of this cluster")
        self.ids.append(node_id)
        # its --peers: every node so far and itself (the members it may reach); the nodes started
        # before keep theirs, as an operator's would
        self.node_peers[node_id] = ";".join(f"{i}-{self.address_of(i)}" for i in self.ids)
        self.joining.add(node_id)
        self.incarnation[node_id] = 0
        self._in_flight[node_id] = set()
        if self.store_type == "file":
            self.power[node_id] = PowerLoss()
        return self._boot(node_id)

    def _leader_server(self, via: str | None):
        node = via if via is not None else self.leader()
        if node is None or node in self.crashed:
            return None
        return self.servers[node]

    def _membership(self, method: str, via: str | None, *args, **kwargs) -> Future:
        server = self._leader_server(via)
        if server is None:
            f: Future = Future()
            f.set_exception(ConnectionError("no leader to ask"))
            return f
        return self._track(server.config.self_id, getattr(server, method)(*args, **kwargs))

    def add_learner(self, node_id: str, via: str | None = None) -> Future:
        return self._membership("add_learner", via, node_id, self.address_of(node_id))

    def promote(self, node_id: str, via: str | None = None) -> Future:
        return self._membership("promote", via, node_id)

    def remove_member(self, node_id: str, via: str | None = None) -> Future:
        return self._membership("remove_member", via, node_id)

    def add_member(self, node_id: str, via: str | None = None, timeout_ms: int = 60_000) -> Future:
        return self._membership("add_member", via, node_id, self.address_of(node_id), timeout_ms=timeout_ms)

    def members(self, node_id: str | None = None) -> tuple[list[str], list[str]]:
        """(voters, learners) in force at ``node_id`` (default: the leader)."""
        node = node_id if node_id is not None else self.leader()
        config = self.servers[node].node.member_state.configuration if node is not None else None
        if config is None:
            return [], []
        return sorted(config.voters), sorted(config.learners)

    def check_commit_quorum(self, node_id: str, committed: int) -> None:
        """I11: an entry a leader commits is held by a quorum of the voters of the configuration
        in force at that leader when it decided (learners and removed members count toward
        nothing). The decision may come in the same ``Ready`` as a newer configuration (a change
        asked in the same turn): the configuration of the ``Ready`` before counts too. A voter
        that is down or recovering (it may have lost what it acknowledged, within what the
        durability mode allows) counts as holding the entry; every other voter is read now."""
        node = self.servers[node_id].node
        member = node.member_state
        before = self._config_seen.get(node_id)
        self._config_seen[node_id] = member.configuration
        seen = self._commit_seen
        if committed <= seen.get(node_id, -1):
            return
        seen[node_id] = committed
        if member.role is not Role.LEADER or committed < 0 or member.configuration is None:
            return
        try:
            term = node.store.get_entry_term(committed)
        except DLedgerError:
            return
        verdicts = [self._held_by(member.configuration, committed, term)]
        if before is not None and before is not member.configuration:
            verdicts.append(self._held_by(before, committed, term))
        if not any(ok for ok, _h, _m in verdicts):
            _ok, holding, missing = verdicts[0]
            self.invariants.problems.append(
                f"I11 at {self.now_ms} ms: leader {node_id} committed index {committed} (term {term}) held by "
                f"{holding} of its voters {sorted(member.configuration.voters)}; not by {missing}")

    def _held_by(self, config, index: int, term: int) -> tuple[bool, int, list[str]]:
        holding, missing = 0, []
        for voter in config.voters:
            if voter not in self.servers or voter in self.crashed:
                holding += 1
                continue
            other = self.servers[voter].node
            if other.recovery.recovering:
                holding += 1
                continue
            try:
                held = other.store.get_entry_term(index) == term
            except DLedgerError:
                held = False
            if held:
                holding += 1
            else:
                missing.append(voter)
        return holding >= len(config.voters) // 2 + 1, holding, missing

    def wipe(self, node_id: str) -> None:
        """Kill ``node_id`` and erase its store: the machine lost its disk. It stays down until
        ``restart``, which starts it empty."""
        self.crash(node_id)
        if self.store_type == "memory":
            cfg = self.config_for(node_id)
            self._memory[node_id] = DLedgerMemoryStore(data_file_size=cfg.mapped_file_size_for_entry_data)
        else:
            shutil.rmtree(self.config_for(node_id).default_path, ignore_errors=True)
            self.power[node_id] = PowerLoss()
        self.disks.pop(node_id, None)
