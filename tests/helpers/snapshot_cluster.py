"""Clusters of the simulator whose nodes run ``HashChainStateMachine`` with snapshots, shared by
the snapshot tests: build one, append, look at the snapshots a node keeps, and one whose
follower was down while the leader trimmed its log past it."""

from __future__ import annotations

import os

from dledger.sim import Cluster
from dledger.sim.hash_chain import HashChainStateMachine


def chain_cluster(tmp_path, n=3, seed=1, **config):
    machines: dict[str, HashChainStateMachine] = {}
    problems: list[str] = []
    incarnations: dict[str, int] = {}

    def factory(node_id):
        incarnations[node_id] = incarnations.get(node_id, 0) + 1
        sm = HashChainStateMachine(node_id, problems)
        machines[f"{node_id}#{incarnations[node_id]}"] = sm
        return sm

    c = Cluster(n, seed=seed, store="file", base_dir=tmp_path, state_machine_factory=factory, **config)
    return c, machines, problems


def append_many(c, count, size=200, tag=b"x"):
    futs = [c.append(tag + i.to_bytes(4, "big") * (size // 4)) for i in range(count)]
    assert c.run_until(lambda: all(f.done() for f in futs), 60_000)
    assert all(f.exception() is None for f in futs), [f.exception() for f in futs if f.exception()][:3]
    return futs


def snapshot_dirs(c, node_id):
    base = os.path.join(c.servers[node_id].store.store_dir, "snapshot")
    return sorted(int(n.split("_")[1]) for n in os.listdir(base) if n.startswith("snapshot_"))


def behind_cluster(tmp_path, seed=3, padding=0, **config):
    """A cluster whose follower was down while the leader trimmed its log past it."""
    settings = dict(snapshot_threshold=100, mapped_file_size_for_entry_data=64 * 1024,
                    snapshot_follower_window_ms=1000)
    settings.update(config)
    c, machines, problems = chain_cluster(tmp_path, seed=seed, **settings)
    for sm in machines.values():
        sm.padding = padding
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 50)
    leader = c.leader()
    follower = next(i for i in c.ids if i != leader)
    c.crash(follower)
    c.run_for(3000)
    append_many(c, 1200, tag=b"b")
    c.run_for(3000)
    lstore = c.servers[leader].store
    assert lstore.ledger_before_begin_index > 50, "the leader trimmed past the follower"
    return c, machines, problems, leader, follower
