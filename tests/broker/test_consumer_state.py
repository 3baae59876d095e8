"""Consumer state replicated through the log: offsets committed on the master are on every
replica once dispatched, survive a master failover and restarts (the saved table, and the log
when the table is gone or damaged), and records of other kinds reach their subscribers in log
order. Topics: auto-created queue counts, system topics hidden."""

import json
import os

from dledger.broker import PutMessageStatus
from dledger.broker.consumer_state import SNAPSHOT, SYSTEM_TOPIC
from dledger.broker.topics import DEFAULT_QUEUES, is_system_topic, known_topics, queue_count

from .helpers import OK, BrokerGroup


def commit(g, group, topic, queue_id, offset, via=None):
    f = g.logs[via or g.elected()].consumer_state.commit_offset_async(group, topic, queue_id, offset)
    assert g.c.run_until(f.done, 5_000)
    return f.result()


def test_a_committed_offset_is_on_every_replica_and_the_next_master(tmp_path):
    with BrokerGroup(tmp_path, seed=5) as g:
        lead = g.elected()
        assert commit(g, "G1", "T", 0, 7).status is OK
        assert commit(g, "G1", "T", 1, 3).status is OK
        assert commit(g, "G1", "T", 0, 9).status is OK          # a later commit replaces it
        assert commit(g, "G2", "T", 0, 2).status is OK
        g.settle()
        for node, log in g.logs.items():
            assert log.consumer_state.offset("G1", "T", 0) == 9, node
            assert log.consumer_state.offset("G1", "T", 1) == 3, node
            assert log.consumer_state.offset("G2", "T", 0) == 2, node
            assert log.consumer_state.offset("G3", "T", 0) is None, node
        g.c.crash(lead)
        new = g.elected()
        assert new != lead
        assert g.logs[new].consumer_state.offset("G1", "T", 0) == 9
        assert commit(g, "G1", "T", 0, 4).status is OK          # a reset is a commit too
        assert g.logs[new].consumer_state.offset("G1", "T", 0) == 4


def test_a_commit_on_a_slave_is_refused_and_changes_nothing(tmp_path):
    with BrokerGroup(tmp_path, seed=6) as g:
        lead = g.elected()
        slave = next(i for i in g.logs if i != lead)
        r = commit(g, "G", "T", 0, 5, via=slave)
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        g.settle()
        assert all(log.consumer_state.offset("G", "T", 0) is None for log in g.logs.values())


def test_bad_commit_arguments_are_refused_by_name(tmp_path):
    with BrokerGroup(tmp_path, seed=7) as g:
        lead = g.elected()
        for args, word in [(("", "T", 0, 1), "group"), (("G", "bad topic", 0, 1), "topic"),
                           (("G", "T", -1, 1), "queue"), (("G", "T", 0, -1), "offset"),
                           (("G", "T", 0, "1"), "offset")]:
            r = commit(g, *args, via=lead)
            assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and word in r.detail, (args, r)


def test_offsets_survive_a_restart_from_the_saved_table_and_from_the_log(tmp_path):
    with BrokerGroup(tmp_path, seed=8) as g:
        lead = g.elected()
        for q in range(3):
            assert commit(g, "G", "T", q, 10 + q).status is OK
        g.settle()
        g.c.run_for(1_500)                       # a dispatch checkpoint saves the table
        follower = next(i for i in g.logs if i != lead)
        saved = json.load(open(os.path.join(g.logs[follower].root, SNAPSHOT)))
        assert saved["applied"] == 3 and ["G", "T", 2, 12] in saved["offsets"]
        log = g.restart(follower)
        assert log.consumer_state.offset("G", "T", 2) == 12
        # a damaged table: rebuilt from the records the log holds
        g.logs[follower].close()
        with open(os.path.join(g.logs[follower].root, SNAPSHOT), "w") as f:
            f.write('{"applied": "x"')
        log = g.restart(follower)
        g.settle()
        assert [log.consumer_state.offset("G", "T", q) for q in range(3)] == [10, 11, 12]


def test_records_of_any_kind_reach_subscribers_in_log_order_old_and_new(tmp_path):
    with BrokerGroup(tmp_path, seed=9) as g:
        lead = g.elected()
        fs = [g.logs[lead].consumer_state.submit_async("ack", {"n": i}) for i in range(3)]
        assert g.c.run_until(lambda: all(f.done() for f in fs), 5_000)
        assert all(f.result().status is OK for f in fs)
        g.settle()
        seen = {node: [] for node in g.logs}
        for node, log in g.logs.items():
            log.consumer_state.subscribe("ack", lambda r, node=node: seen[node].append(r["n"]))
        assert all(s == [0, 1, 2] for s in seen.values())          # replayed at subscribe
        f = g.logs[lead].consumer_state.submit_async("ack", {"n": 3})
        g.logs[lead].consumer_state.submit_async("other", {"n": 99})
        assert g.c.run_until(f.done, 5_000)
        g.settle()
        assert all(s == [0, 1, 2, 3] for s in seen.values()), seen


def test_a_system_topic_record_that_does_not_decode_is_passed_over(tmp_path):
    with BrokerGroup(tmp_path, seed=10) as g:
        lead = g.elected()
        assert g.put(SYSTEM_TOPIC, 0, b"not msgpack \xc1").status is OK
        assert commit(g, "G", "T", 0, 1).status is OK
        g.settle()
        assert all(log.consumer_state.offset("G", "T", 0) == 1 for log in g.logs.values())
        assert g.logs[lead].consumer_state.applied == 2


def test_topics_are_auto_created_with_the_default_queues_and_system_topics_are_hidden(tmp_path):
    with BrokerGroup(tmp_path, seed=11) as g:
        lead = g.elected()
        log = g.logs[lead]
        assert queue_count(log, "Fresh") == DEFAULT_QUEUES and queue_count(log, "Fresh", 8) == 8
        assert queue_count(log, "bad topic") == 0
        assert g.put("Wide", 6, b"x").status is OK
        assert commit(g, "G", "Wide", 6, 1).status is OK
        g.settle()
        assert queue_count(log, "Wide") == 7 and queue_count(log, "Wide", 16) == 16
        assert known_topics(log) == ["Wide"]
        assert is_system_topic(SYSTEM_TOPIC) and not is_system_topic("Wide")
