"""Java DLedger's AppendAndGetTest, BatchPush and WriteTest, in virtual time."""

import pytest

from dledger.protocol import DLedgerResponseCode as Code
from dledger.sim import Cluster


def elected(c: Cluster) -> str:
    assert c.run_until(lambda: c.leader() is not None, 2_000)
    return c.leader()


def append_all(c: Cluster, bodies, via=None):
    futures = [c.append(b, via=via) for b in bodies]
    assert c.run_until(lambda: all(f.done() for f in futures), 3_000)
    return [f.result() for f in futures]


@pytest.mark.parametrize("store", ["memory", "file"])
def test_single_node_appends_get_consecutive_indices_and_read_back(store, tmp_path):
    with Cluster(n=1, seed=1, store=store, base_dir=tmp_path) as c:
        elected(c)
        bodies = [bytes([i]) * 100 for i in range(10)]
        rs = append_all(c, bodies)
        assert [r.code for r in rs] == [Code.SUCCESS] * 10
        assert [r.index for r in rs] == list(range(10))
        assert [r.pos for r in rs] == [i * (48 + 100) for i in range(10)]
        assert [c.servers["n0"].get(i).body for i in range(10)] == bodies
        c.check()


@pytest.mark.parametrize("store", ["memory", "file"])
def test_three_nodes_replicate_every_append_to_every_replica(store, tmp_path):
    with Cluster(n=3, seed=2, store=store, base_dir=tmp_path) as c:
        lead = elected(c)
        rs = append_all(c, [b"body-%d" % i for i in range(10)])
        assert [r.index for r in rs] == list(range(10))
        assert c.run_until(lambda: all(s.store.ledger_end_index == 9 for s in c.servers.values()), 1_000)
        assert [c.servers[lead].get(i).body for i in range(10)] == [b"body-%d" % i for i in range(10)]
        c.check()


def test_appends_fired_without_waiting_all_succeed_with_the_stored_positions():
    with Cluster(n=3, seed=3) as c:
        lead = elected(c)
        rs = append_all(c, [b"async-%d" % i for i in range(10)])
        assert all(r.code == Code.SUCCESS for r in rs)
        store = c.servers[lead].store
        assert [r.pos for r in rs] == [store.get(r.index).pos for r in rs]
        c.check()


def test_batch_append_returns_the_position_of_every_entry():
    with Cluster(n=2, seed=4, leader="n0") as c:
        bodies = [b"x" * 128 * (i + 1) for i in range(10)]
        f = c.servers["n0"].batch_append(bodies)
        assert c.run_until(f.done, 1_000)
        r = f.result()
        assert (r.code, r.index) == (Code.SUCCESS, 9)
        assert r.positions == [48 * i + 128 * i * (i + 1) // 2 for i in range(10)]
        assert c.run_until(lambda: c.servers["n1"].store.ledger_end_index == 9, 1_000)


def test_writes_complete_with_the_state_machines_answer():
    class Counter:
        def __init__(self):
            self.total = 0

        def on_apply(self, entries):
            for a in entries:
                self.total += 1
                a.resp = self.total

    machines = {}

    def factory(node_id):
        machines[node_id] = Counter()
        return machines[node_id]

    with Cluster(n=3, seed=5, state_machine_factory=factory) as c:
        lead = elected(c)
        futures = [c.servers[lead].write(b"w%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        for i, f in enumerate(futures):
            resp, result = f.result()
            assert resp.code == Code.SUCCESS and result == resp.index + 1 == i + 1
        assert c.run_until(lambda: all(m.total == 10 for m in machines.values()), 1_000)


def test_an_append_to_a_follower_is_refused_with_the_leaders_id():
    with Cluster(n=3, seed=6) as c:
        lead = elected(c)
        follower = next(i for i in c.ids if i != lead)
        assert c.run_until(lambda: c.servers[follower].leader_id == lead, 500)   # told by a heartbeat
        f = c.append(b"x", via=follower)
        assert c.run_until(f.done, 100)
        assert f.result().code == Code.NOT_LEADER and f.result().leader_id == lead
        c.check()
