"""The broker on a follower brought forward past the leader's retention: its log begins where
the leader's does (the leader moved its log start, ``core.log_start``), its consume queues start
at the queue offset of the first message it holds (RocketMQ's min offset), and it serves the
same messages at the same physical offsets as the leader."""

import time

from dledger.broker import PutMessageStatus

from .helpers import BrokerGroup

RETENTION = dict(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=32 * 64,
                 file_reserved_hours=1, delete_when=";".join(str(h) for h in range(24)))
QUEUES = [("A", 0), ("A", 1), ("B", 0)]


def test_a_caught_up_follower_starts_its_queues_at_the_min_offsets(tmp_path):
    with BrokerGroup(tmp_path, seed=4, record_applies=False, **RETENTION) as g:
        lead = g.elected()
        items = [(t, q, b"m%03d-" % k + bytes(120)) for k in range(30) for t, q in QUEUES[k % 3:k % 3 + 1]]
        assert all(r.status is PutMessageStatus.PUT_OK for r in g.put_many(items))
        g.settle()
        f = next(i for i in g.c.ids if i != lead)
        g.c.crash(f)
        more = [(t, q, b"n%03d-" % k + bytes(150)) for k in range(60) for t, q in QUEUES[k % 3:k % 3 + 1]]
        assert all(r.status is PutMessageStatus.PUT_OK for r in g.put_many(more))
        g.settle()
        st = g.c.servers[lead].store
        assert st.clean(time.time() + 30 * 86400) > 0
        begin = st.ledger_before_begin_index
        g.restart(f)
        g.settle(20_000)
        lead = g.c.leader()
        fs, ls = g.c.servers[f].store, g.c.servers[lead].store
        assert fs.ledger_before_begin_index == ls.ledger_before_begin_index >= begin
        leader_log, follower_log = g.logs[lead], g.logs[f]
        assert follower_log.min_offset() == leader_log.min_offset() > 0
        for t, q in QUEUES:
            lo = leader_log.min_queue_offset(t, q)
            assert lo > 0                                                  # the queue's head is gone
            assert follower_log.min_queue_offset(t, q) == lo
            assert follower_log.reput.find_queue(t, q).min_offset == lo     # its queue starts there
            assert follower_log.max_queue_offset(t, q) == leader_log.max_queue_offset(t, q)
            want, _ = leader_log.get_messages(t, q, lo, 1_000)
            got, _ = follower_log.get_messages(t, q, 0, 1_000)              # below the min: moved to it
            assert [(m.queue_offset, m.physical_offset, m.body) for m in got] == \
                [(m.queue_offset, m.physical_offset, m.body) for m in want]
            assert got and got[0].queue_offset == lo
        assert follower_log.reput.problems == []
