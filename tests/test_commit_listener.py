"""``DLedgerServer.add_commit_listener``: told on every replica, in order, once per step that
moved the commit index, and a listener that raises is logged without stopping the others."""

from dledger.sim import Cluster


def test_every_replica_is_told_of_its_commits_in_order_and_a_failing_listener_is_contained(caplog):
    c = Cluster(n=3, seed=4)
    try:
        told = {i: [] for i in c.servers}
        for i, s in c.servers.items():
            s.add_commit_listener(lambda index: 1 / 0)                  # logged, contained
            s.add_commit_listener(lambda index, i=i: told[i].append(index))
        assert c.run_until(lambda: c.leader() is not None, 5_000)
        lead = c.servers[c.leader()]
        futures = [lead.append(b"x%d" % k) for k in range(20)]
        assert c.run_until(lambda: all(f.done() for f in futures), 5_000)
        last = max(f.result().index for f in futures)
        assert c.run_until(lambda: all(t and t[-1] >= last for t in told.values()), 5_000)
        for i, t in told.items():
            assert t == sorted(set(t)), (i, t)                       # increasing, never repeated
            assert t[-1] == c.servers[i].node.committed_index
        assert "commit listener" in caplog.text and "ZeroDivisionError" in caplog.text
    finally:
        c.close()
