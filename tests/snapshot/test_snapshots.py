"""State-machine snapshots on the production server in the simulator: taken, trimmed, loaded."""

from __future__ import annotations

import os
import re

import pytest

from dledger.sim import Cluster
from dledger.sim.hash_chain import same_history
from helpers.snapshot_cluster import append_many, behind_cluster, chain_cluster, snapshot_dirs


def test_threshold_takes_snapshots_and_trims_the_log(tmp_path):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=200, max_snapshot_reserve_num=2,
                                          mapped_file_size_for_entry_data=64 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 1500)
    c.run_for(2000)
    for node_id in c.ids:
        kept = snapshot_dirs(c, node_id)
        assert 1 <= len(kept) <= 2, (node_id, kept)
        store = c.servers[node_id].store
        # the log keeps back to the oldest kept snapshot, and no further back than a segment
        assert 0 <= store.ledger_before_begin_index <= min(kept), (node_id, kept, store.ledger_before_begin_index)
    assert not problems and not same_history(machines)
    c.check()


def test_restart_loads_the_newest_snapshot_and_replays_only_after_it(tmp_path):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=100,
                                          mapped_file_size_for_entry_data=64 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 700)
    c.run_for(2000)
    follower = next(i for i in c.ids if i != c.leader())
    newest = snapshot_dirs(c, follower)[-1]
    c.crash(follower)
    c.restart(follower)
    sm = machines[f"{follower}#2"]
    assert sm.snapshots_loaded == [newest]
    append_many(c, 50, tag=b"y")
    c.run_for(2000)
    # only what follows the snapshot was applied again
    assert min(i for i in sm.states if i != newest) > newest
    assert not problems and not same_history(machines)
    c.check()


def test_a_damaged_newest_snapshot_falls_back_to_the_previous_one(tmp_path):
    c, machines, problems = chain_cluster(tmp_path, snapshot_threshold=100, max_snapshot_reserve_num=3,
                                          mapped_file_size_for_entry_data=64 * 1024)
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 700)
    c.run_for(2000)
    follower = next(i for i in c.ids if i != c.leader())
    kept = snapshot_dirs(c, follower)
    assert len(kept) >= 2
    c.crash(follower)
    data = os.path.join(c.servers[follower].store.store_dir, "snapshot", f"snapshot_{kept[-1]}", "data")
    with open(data, "r+b") as f:
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0x40]))
    c.restart(follower)
    sm = machines[f"{follower}#2"]
    assert sm.snapshots_loaded == [kept[-2]]
    append_many(c, 30, tag=b"z")
    c.run_for(2000)
    assert not problems and not same_history(machines)
    c.check()


def test_server_snapshot_returns_its_index(tmp_path):
    c, machines, problems = chain_cluster(tmp_path)
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 40)
    leader = c.leader()
    fut = c.servers[leader].snapshot()
    assert c.run_until(fut.done)
    index = fut.result()
    assert index == c.servers[leader].node.applied_index
    assert snapshot_dirs(c, leader) == [index]


def test_snapshot_needs_a_state_machine_that_saves(tmp_path):
    c = Cluster(3, seed=2, store="file", base_dir=tmp_path)
    assert c.run_until(lambda: c.leader() is not None)
    with pytest.raises(RuntimeError, match="takes no snapshots"):
        c.servers[c.leader()].snapshot()


def _log_start_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("log start moved")]


def test_a_follower_down_past_the_trimmed_log_catches_up_from_a_snapshot(tmp_path, caplog):
    c, machines, problems, leader, follower = behind_cluster(tmp_path)
    with caplog.at_level("WARNING", logger="dledger.core.snapshot_receiver"):
        c.restart(follower)
        lstore = c.servers[leader].store
        assert c.run_until(lambda: c.servers[follower].node.applied_index >= lstore.ledger_end_index, 20_000)
    moved = _log_start_lines(caplog)
    assert moved and re.search(r"this log held entries 0\.\.\d+, now begins after \d+", moved[0]), moved
    sm = machines[f"{follower}#2"]
    assert sm.snapshots_loaded and sm.snapshots_loaded[-1] > 50
    append_many(c, 30, tag=b"c")
    c.run_for(2000)
    assert not problems and not same_history(machines)
    c.check()


def test_a_wiped_follower_catches_up_from_a_snapshot(tmp_path, caplog):
    import shutil
    c, machines, problems, leader, follower = behind_cluster(tmp_path, seed=5)
    shutil.rmtree(os.path.join(str(tmp_path), f"dledger-{follower}"))
    with caplog.at_level("WARNING", logger="dledger.core.snapshot_receiver"):
        c.restart(follower)
        lstore = c.servers[leader].store
        assert c.run_until(lambda: c.servers[follower].node.applied_index >= lstore.ledger_end_index, 20_000)
    moved = _log_start_lines(caplog)
    assert moved and "this log held no entries, now begins after" in moved[0], moved
    assert machines[f"{follower}#2"].snapshots_loaded
    assert not problems and not same_history(machines)
    c.check()


def test_a_broken_install_resumes_where_the_durable_bytes_end(tmp_path, caplog):
    # a snapshot of about 2 MiB in chunks of 128 KiB: the follower restarts mid-way
    c, machines, problems, leader, follower = behind_cluster(
        tmp_path, seed=7, padding=2 << 20, max_frame_bytes=192 * 1024, max_batch_append_size=64 * 1024)
    c.restart(follower)
    tmp = os.path.join(str(tmp_path), f"dledger-{follower}", "snapshot", "install_tmp", "data")
    assert c.run_until(lambda: os.path.exists(tmp) and os.path.getsize(tmp) > 300 * 1024, 20_000)
    c.crash(follower)
    part = os.path.getsize(tmp)
    caplog.clear()
    with caplog.at_level("INFO", logger="dledger.core.snapshot_receiver"):
        c.restart(follower)
        lstore = c.servers[leader].store
        assert c.run_until(lambda: c.servers[follower].node.applied_index >= lstore.ledger_end_index, 30_000)
    assert any(f"resuming the install" in r.getMessage() and f"at byte {part}" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records][:5]
    assert machines[f"{follower}#3"].snapshots_loaded
    assert not problems and not same_history(machines)
    c.check()


def test_age_logs_runs_retention_as_if_time_had_passed(tmp_path):
    c = Cluster(3, seed=4, store="file", base_dir=tmp_path, record_applies=False,
                mapped_file_size_for_entry_data=16 * 1024, file_reserved_hours=1,
                delete_when=";".join(str(h) for h in range(24)))     # every hour deletes
    assert c.run_until(lambda: c.leader() is not None)
    append_many(c, 300)
    c.run_for(500)
    assert c.age_logs(0.5) == 0                     # not expired yet
    assert c.age_logs(2) > 0
    assert all(c.servers[i].store.ledger_before_begin_index >= 0 for i in c.live())
    c.check()
