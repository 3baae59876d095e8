"""Dispatch follows commits: every replica dispatches a committed message within a dispatch
interval or two of learning the commit (no polling), also while a turn waits to write the
dispatch checkpoint, and nothing is dispatched while nothing commits."""

from .helpers import OK, BrokerGroup


def test_each_commit_is_dispatched_within_an_interval_even_while_a_checkpoint_is_pending(tmp_path):
    with BrokerGroup(tmp_path, seed=12) as g:
        lead = g.elected()
        log = g.logs[lead]
        for k in range(5):
            f = log.put_message_async("T", 0, b"m%d" % k)
            assert g.c.run_until(f.done, 5_000) and f.result().status is OK
            index = g.c.servers[lead].node.committed_index
            start = g.c.now_ms
            # the leader committed it: it dispatches it at most an interval (5 ms) later, although
            # after the first message a turn is pending for the checkpoint a second away
            assert g.c.run_until(lambda: log.reput.next_index > index, 50)
            assert g.c.now_ms - start <= 2 * log.dispatch_interval_ms, (k, g.c.now_ms - start)
        g.settle()
        turns = {i: l.reput.next_index for i, l in g.logs.items()}
        g.c.run_for(3_000)                  # nothing commits: nothing more to dispatch
        assert {i: l.reput.next_index for i, l in g.logs.items()} == turns
