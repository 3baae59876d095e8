"""A crash at every step of taking, pruning and installing a snapshot, in the simulator: the
node restarts on what the step left on disk and catches up, each entry applied once."""

from __future__ import annotations

import os

import pytest

from dledger.core.snapshot_receiver import SnapshotReceiver
from dledger.snapshot import file_snapshot_store as fss
from dledger.sim.hash_chain import HashChainStateMachine, same_history
from helpers.snapshot_cluster import append_many, behind_cluster, chain_cluster, snapshot_dirs

INSTALL_STEPS = ["after the first chunk", "after the whole is checked", "after the log start moved",
                 "after the snapshot is in place"]


def _caught_up(c, leader, follower):
    lstore = c.servers[leader].store
    return c.run_until(lambda: follower not in c.crashed
                       and c.servers[follower].node.applied_index >= lstore.ledger_end_index, 30_000)


@pytest.mark.parametrize("step", INSTALL_STEPS)
def test_a_crash_at_each_step_of_an_install_restarts_and_catches_up(step, tmp_path, monkeypatch):
    c, machines, problems, leader, follower = behind_cluster(tmp_path, seed=11, padding=600 * 1024,
                                                             max_frame_bytes=192 * 1024,
                                                             max_batch_append_size=64 * 1024)
    fired = []

    def die(where):
        if not fired and c.servers[follower].node is not None:
            fired.append(where)
            c.crash_here(follower)

    write_chunk, verify, finish = fss.InstallTarget.write_chunk, fss.InstallTarget.verify, fss.InstallTarget.finish
    move = SnapshotReceiver._finish

    if step == "after the first chunk":
        def patched(self, *a, **k):
            n = write_chunk(self, *a, **k)
            die(step)
            return n
        monkeypatch.setattr(fss.InstallTarget, "write_chunk", patched)
    elif step == "after the whole is checked":
        def patched(self):
            out = verify(self)
            die(step)
            return out
        monkeypatch.setattr(fss.InstallTarget, "verify", patched)
    elif step == "after the log start moved":
        def patched(self, *a, **k):
            die(step)
            return finish(self, *a, **k)
        monkeypatch.setattr(fss.InstallTarget, "finish", patched)
    else:
        load = HashChainStateMachine.on_snapshot_load

        def patched(self, reader):
            die(step)
            return load(self, reader)
        monkeypatch.setattr(HashChainStateMachine, "on_snapshot_load", patched)
    c.restart(follower)
    assert c.run_until(lambda: bool(fired), 20_000), "the install never reached the step"
    assert follower in c.crashed
    c.restart(follower)
    assert _caught_up(c, leader, follower)
    append_many(c, 20, tag=b"after")
    c.run_for(2000)
    assert not problems and not same_history(machines)
    c.check()


def test_a_crash_during_a_save_leaves_the_older_snapshots_and_no_partial_one(tmp_path):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=0, mapped_file_size_for_entry_data=64 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 100)
    c.run_for(500)                      # the followers apply too
    node = next(i for i in c.ids if i != c.leader())
    first = c.snapshot(node)
    assert c.run_until(first.done) and first.result() >= 0
    append_many(c, 50, tag=b"more")
    c.run_for(500)
    c.snapshot(node)                    # its worker's part runs in a later turn: crash before it
    tmp = os.path.join(c.servers[node].store.store_dir, "snapshot", "tmp")
    assert os.path.isdir(tmp)
    c.crash(node)
    c.restart(node)
    assert not os.path.exists(tmp)
    assert snapshot_dirs(c, node) == [first.result()]
    assert machines[f"{node}#2"].snapshots_loaded == [first.result()]
    assert _caught_up(c, c.leader(), node)
    assert not problems and not same_history(machines)
    c.check()


def test_a_crash_between_a_snapshot_and_the_trim_trims_later(tmp_path, monkeypatch):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=100, max_snapshot_reserve_num=1,
                                          mapped_file_size_for_entry_data=16 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    node = next(i for i in c.ids if i != c.leader())
    from dledger.store import DLedgerMmapFileStore
    remove = DLedgerMmapFileStore.remove_prefix
    fired = []

    def patched(self, upto):
        if not fired and self.store_dir == c.servers[node].store.store_dir:
            fired.append(upto)
            c.crash_here(node)
        return remove(self, upto)

    monkeypatch.setattr(DLedgerMmapFileStore, "remove_prefix", patched)
    for k in range(4):
        append_many(c, 100, tag=b"r%d" % k)
        c.run_for(300)
    assert fired and node in c.crashed
    c.restart(node)
    append_many(c, 300, tag=b"more")
    c.run_for(3000)
    store = c.servers[node].store
    assert store.ledger_before_begin_index > 0          # trimmed by a later snapshot
    assert not problems and not same_history(machines)
    c.check()


def test_a_crash_while_pruning_keeps_a_usable_snapshot(tmp_path, monkeypatch):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=50, max_snapshot_reserve_num=1,
                                          mapped_file_size_for_entry_data=64 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    node = next(i for i in c.ids if i != c.leader())
    prune = fss.FileSnapshotStore.prune
    fired = []

    def patched(self):
        if not fired and self.base.startswith(c.servers[node].store.store_dir) and len(self.indexes()) > 1:
            fired.append(self.indexes())
            c.crash_here(node)
        return prune(self)

    monkeypatch.setattr(fss.FileSnapshotStore, "prune", patched)
    for k in range(4):
        append_many(c, 100, tag=b"r%d" % k)
        c.run_for(300)
    assert fired and node in c.crashed
    c.restart(node)
    assert machines[f"{node}#2"].snapshots_loaded == [max(fired[0])]
    append_many(c, 30, tag=b"more")
    c.run_for(2000)
    assert len(snapshot_dirs(c, node)) == 1
    assert not problems and not same_history(machines)
    c.check()
