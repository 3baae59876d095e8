"""Crash and restart with file stores (committed entries survive a restart of every node; an emptied follower is refilled; acknowledged appends stay), in virtual time."""

import pytest

from dledger.sim import Cluster
from dledger.sim.scheduler import SIM_EPOCH


def test_whole_cluster_restart_keeps_every_acknowledged_append(tmp_path):
    with Cluster(n=3, seed=1, store="file", base_dir=tmp_path) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        futures = [c.append(b"e%02d" % i) for i in range(40)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        acked = {f.result().index: b"e%02d" % i for i, f in enumerate(futures) if f.result().ok}
        assert len(acked) == 40
        for i in c.ids:
            c.crash(i)
        for i in c.ids:
            c.restart(i)
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        f = c.append(b"after")
        assert c.run_until(f.done, 1_000) and f.result().ok and f.result().index == 40
        lead = c.servers[c.leader()]
        assert {i: lead.get(i).body for i in acked} == acked
        c.check()


def test_a_follower_restarted_with_an_empty_store_is_refilled(tmp_path):
    with Cluster(n=3, seed=2, store="file", base_dir=tmp_path) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        futures = [c.append(b"x%d" % i) for i in range(30)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        victim = next(i for i in c.ids if i != lead)
        c.crash(victim)
        import shutil
        shutil.rmtree(c.config_for(victim).default_path)
        c.restart(victim)
        assert c.run_until(lambda: c.servers[victim].store.ledger_end_index == 29
                           and c.servers[victim].node.committed_index == 29, 3_000)
        c.check()


def test_crashes_of_a_minority_never_lose_acknowledged_appends(tmp_path):
    with Cluster(n=5, seed=3, store="file", base_dir=tmp_path) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        for round_ in range(5):
            for i in range(10):
                c.append(b"r%d-%d" % (round_, i))  # outcomes land in c.history, checked below
            c.run_for(30)
            victims = [i for i in c.ids if i != c.leader()][:2] if round_ % 2 else [c.leader()]
            for v in victims:
                if v is not None:
                    c.crash(v)
            c.run_until(lambda: c.leader() is not None, 2_000)
            c.run_for(300)
            for v in sorted(c.crashed):
                c.restart(v)
        c.run_for(2_000)
        c.check()


def test_a_crashed_node_sends_nothing_more_and_its_pending_calls_fail():
    with Cluster(n=3, seed=4) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        c.partition([lead], [i for i in c.ids if i != lead])
        pending = [c.append(b"p%d" % i) for i in range(5)]
        c.run_for(10)
        assert not any(f.done() for f in pending)
        senders = []
        c.network.drop_if = lambda env: senders.append(env.src) and False
        c.crash(lead)
        assert all(f.done() and not f.result().ok for f in pending)   # the client's connection broke
        assert not c.processes[lead].alive
        with pytest.raises(RuntimeError):
            c.servers[lead].append(b"into a dead process")
        c.heal()
        c.run_for(2_000)
        assert lead not in senders and senders                        # the others go on talking
        c.check()


def test_step_runs_one_event_at_a_time():
    with Cluster(n=3, seed=5) as c:
        before, t = c.scheduler.events_run, c.now_ms
        for _ in range(50):
            assert c.step()
            assert c.now_ms >= t
            t = c.now_ms
        assert c.scheduler.events_run == before + 50
        assert c.run_until(lambda: c.leader() is not None, 2_000)


def test_the_server_flushes_and_cleans_a_wrapped_file_store_on_the_virtual_wall_clock(tmp_path):
    with Cluster(n=1, seed=6, store="file", base_dir=tmp_path, disk_faults=True, record_applies=False) as c:
        inner = c.disks["n0"].inner
        flushes, cleans = [], []
        real_flush, real_clean = inner.flush_if_due, inner.clean
        inner.flush_if_due = lambda now_ms: flushes.append(now_ms) or real_flush(now_ms)
        inner.clean = lambda now=None: cleans.append(now) or real_clean(now)
        c.run_for(1_000)
        assert len(flushes) >= 4 and len(cleans) >= 9
        assert all(SIM_EPOCH < t <= SIM_EPOCH + c.now_ms / 1000 for t in cleans)
        assert inner.background_flush is False
