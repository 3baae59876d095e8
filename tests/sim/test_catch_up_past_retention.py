"""A follower whose next entry the leader no longer holds (retention deleted its segment, or
the log's head was reset) catches up: the leader moves the follower's log start to its own
(an ``InstallSnapshotRequest`` without a snapshot, ``core.log_start``), then pushes as usual.
The follower ends byte-identical with the leader over the range both hold, positions included.
All in virtual time."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code, InstallSnapshotRequest, InstallSnapshotResponse
from dledger.sim import Cluster
from dledger.sim.network import NetworkOptions

#: every hour is a deletion hour, and a segment expires after an hour: ``clean(FUTURE)`` deletes
#: every committed segment but the last (the simulator's own clean timer, on its 2023 clock,
#: never finds one expired)
RETENTION = dict(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=32 * 64,
                 file_reserved_hours=1, delete_when=";".join(str(h) for h in range(24)))
FUTURE = time.time() + 30 * 86400


def installs_seen(c: Cluster) -> list:
    """Record every install and its answer on the simulated network (nothing is dropped)."""
    seen: list = []
    previous = c.network.drop_if

    def record(env) -> bool:
        if isinstance(env.msg, (InstallSnapshotRequest, InstallSnapshotResponse)):
            seen.append(env)
        return previous(env) if previous is not None else False

    c.network.drop_if = record
    return seen


def elected(c: Cluster) -> str:
    assert c.run_until(lambda: c.leader() is not None, 5_000)
    return c.leader()


def append_all(c: Cluster, bodies, timeout_ms: int = 20_000) -> None:
    fs = [c.append(b) for b in bodies]
    assert c.run_until(lambda: all(f.done() for f in fs), timeout_ms)
    assert all(f.result().code == Code.SUCCESS for f in fs), [f.result().code for f in fs]


def store(c: Cluster, node: str):
    st = c.servers[node].store
    return getattr(st, "inner", st)


def caught_up(c: Cluster, node: str) -> bool:
    lead = c.leader()
    return lead is not None and node in c.live() and \
        c.servers[node].node.committed_index >= c.servers[lead].node.committed_index >= 0 \
        and store(c, node).ledger_end_index == store(c, lead).ledger_end_index


def assert_identical(c: Cluster, a: str, b: str) -> int:
    """Both logs hold the same records (bytes, so positions too) over the range both hold;
    returns the size of that range."""
    sa, sb = store(c, a), store(c, b)
    lo = max(sa.ledger_before_begin_index, sb.ledger_before_begin_index) + 1
    hi = min(sa.ledger_end_index, sb.ledger_end_index)
    assert hi >= lo
    for i in range(lo, hi + 1):
        assert bytes(sa.get_raw(i)) == bytes(sb.get_raw(i)), i
    return hi - lo + 1


def behind_the_begin(c: Cluster, lead: str, follower: str, clean) -> int:
    """Crash ``follower``, append past it, and make the leader drop its log's head with
    ``clean(store)``; returns the leader's new before-begin index (above the follower's end)."""
    c.crash(follower)
    append_all(c, [b"w%03d" % k + bytes(300) for k in range(60)])
    st = store(c, lead)
    clean(st)
    begin = st.ledger_before_begin_index
    assert begin > store(c, follower).ledger_end_index if c.store_type == "memory" else begin > 0
    return begin


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_follower_down_longer_than_retention_catches_up_byte_identical(tmp_path, kind):
    cfg = RETENTION if kind == "file" else dict(mapped_file_size_for_entry_data=4096)
    c = Cluster(n=3, seed=11, store=kind, base_dir=tmp_path if kind == "file" else None, record_applies=False, **cfg)
    try:
        seen = installs_seen(c)
        lead = elected(c)
        append_all(c, [b"a%03d" % k + bytes(200) for k in range(10)])
        f = next(i for i in c.ids if i != lead)
        end_before = store(c, f).ledger_end_index

        def drop_head(st):
            if kind == "file":
                assert st.clean(FUTURE) > 0
            else:
                st.reset(st.committed_index - 5, st.get_entry_term(st.committed_index - 5))

        begin = behind_the_begin(c, lead, f, drop_head)
        assert begin > end_before
        c.restart(f)
        assert c.run_until(lambda: caught_up(c, f), 20_000)
        fs = store(c, f)
        assert fs.ledger_before_begin_index == begin               # nothing below the leader's begin
        assert fs.ledger_before_begin_term == store(c, c.leader()).ledger_before_begin_term
        assert assert_identical(c, f, c.leader()) > 0
        assert c.servers[f].node.applied_index >= begin
        installs = [e for e in seen if isinstance(e.msg, InstallSnapshotRequest) and e.dst == f]
        assert installs and installs[0].msg.last_included_index == begin
        assert any(isinstance(e.msg, InstallSnapshotResponse) and e.src == f and e.msg.code == Code.SUCCESS
                   for e in seen)
        append_all(c, [b"after"])                                  # and it keeps up afterwards
        assert c.run_until(lambda: caught_up(c, f), 5_000)
        assert_identical(c, f, c.leader())
        c.check()
    finally:
        c.close()


def test_after_a_leader_restart_catch_up_works_from_the_store_alone(tmp_path):
    """Every live node drops its head, then restarts (no push cache survives): the follower
    that was down is brought forward from what the stores hold."""
    c = Cluster(n=3, seed=5, store="file", base_dir=tmp_path, record_applies=False, **RETENTION)
    try:
        lead = elected(c)
        append_all(c, [b"a%03d" % k + bytes(200) for k in range(10)])
        f = next(i for i in c.ids if i != lead)
        c.crash(f)
        append_all(c, [b"w%03d" % k + bytes(300) for k in range(60)])
        others = [i for i in c.ids if i != f]
        assert c.run_until(lambda: all(store(c, i).committed_index == store(c, lead).ledger_end_index
                                       for i in others), 5_000)
        for i in others:
            assert store(c, i).clean(FUTURE) > 0
            c.restart(i)
        new = elected(c)
        begin = store(c, new).ledger_before_begin_index
        assert begin > store(c, f).ledger_end_index
        c.restart(f)
        assert c.run_until(lambda: caught_up(c, f), 20_000)
        assert store(c, f).ledger_before_begin_index >= begin
        assert_identical(c, f, c.leader())
        c.check()
    finally:
        c.close()


def test_a_wiped_follower_catches_up_past_the_leaders_begin(tmp_path):
    c = Cluster(n=3, seed=8, store="file", base_dir=tmp_path, record_applies=False, **RETENTION)
    try:
        lead = elected(c)
        f = next(i for i in c.ids if i != lead)
        behind_the_begin(c, lead, f, lambda st: st.clean(FUTURE))
        shutil.rmtree(c.config_for(f).default_path)                # the disk was replaced
        os.makedirs(c.config_for(f).default_path)
        c.restart(f)
        assert c.run_until(lambda: caught_up(c, f), 20_000)
        assert store(c, f).suspect is None                          # it recovered: caught up from the leader
        assert store(c, f).ledger_before_begin_index == store(c, c.leader()).ledger_before_begin_index
        assert_identical(c, f, c.leader())
        c.check()
    finally:
        c.close()


def test_lost_duplicated_and_replayed_installs_change_nothing_they_should_not():
    """Installs lost, duplicated and replayed seconds later (after the follower appended
    further): the follower still catches up, and a late install never drops what it holds."""
    net = NetworkOptions(replay_min_delay_ms=500, replay_max_delay_ms=3_000)
    c = Cluster(n=3, seed=21, network=net, record_applies=False, mapped_file_size_for_entry_data=4096)
    try:
        seen = installs_seen(c)
        lead = elected(c)
        append_all(c, [b"a%03d" % k for k in range(10)])
        f = next(i for i in c.ids if i != lead)
        behind_the_begin(c, lead, f, lambda st: st.reset(st.committed_index - 3,
                                                         st.get_entry_term(st.committed_index - 3)))
        net.loss, net.duplicate, net.replay = 0.3, 0.3, 0.1          # a bad network while it catches up
        c.restart(f)
        assert c.run_until(lambda: caught_up(c, f), 60_000)
        installs = [e for e in seen if isinstance(e.msg, InstallSnapshotRequest) and e.dst == f]
        assert installs
        net.loss, net.duplicate = 0.0, 0.0
        append_all(c, [b"b%03d" % k for k in range(20)])
        assert c.run_until(lambda: caught_up(c, f), 20_000)
        fs = store(c, f)
        begin, end = fs.ledger_before_begin_index, fs.ledger_end_index
        for env in installs:                                       # every install again, late
            c.network.replay_envelope(env, 1)
        c.run_for(200)
        assert (fs.ledger_before_begin_index, fs.ledger_end_index) == (begin, end)
        assert_identical(c, f, c.leader())
        c.check()
    finally:
        c.close()


def test_a_follower_with_a_state_machine_refuses_and_says_why(caplog):
    """Without snapshots a node with a state machine cannot skip entries: it refuses the
    install with INSTALL_SNAPSHOT_ERROR, keeps its log, and says so in one log line."""
    c = Cluster(n=3, seed=3, mapped_file_size_for_entry_data=4096)     # recording state machines
    try:
        seen = installs_seen(c)
        lead = elected(c)
        append_all(c, [b"a%03d" % k for k in range(10)])
        f = next(i for i in c.ids if i != lead)
        kept = behind_the_begin(c, lead, f, lambda st: st.reset(st.committed_index - 3,
                                                                st.get_entry_term(st.committed_index - 3)))
        end = store(c, f).ledger_end_index
        c.restart(f)
        c.run_for(3_000)
        answers = [e.msg.code for e in seen if isinstance(e.msg, InstallSnapshotResponse) and e.src == f]
        assert answers and set(answers) == {Code.INSTALL_SNAPSHOT_ERROR}
        assert store(c, f).ledger_end_index == end < kept
        assert any("cannot skip them without a snapshot" in r.getMessage() for r in caplog.records)
        assert c.servers[c.leader()].role is Role.LEADER        # the group goes on without it
        append_all(c, [b"more"])
    finally:
        c.close()
