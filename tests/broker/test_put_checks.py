"""The checks a put passes before it is encoded: every wrong argument is a MESSAGE_ILLEGAL
naming the field (never an exception, never a message written), topics follow RocketMQ's
TopicValidator (so no topic can leave ``consumequeue/``), and reads with a topic no put could
have used find nothing."""

import pytest
from hypothesis import given, strategies as st

from dledger.broker import PutMessageStatus as S
from dledger.broker.put_checks import host_problem, put_problem, topic_problem

from broker.helpers import BrokerGroup

GOOD = dict(topic="T", queue_id=0, body=b"x", tags=None, keys=(), properties=None, born_host=None, flag=0)

BAD = [
    ({"topic": None}, "topic: must be a str, got NoneType"),
    ({"topic": 5}, "topic: must be a str, got int"),
    ({"topic": ""}, "topic: is empty"),
    ({"topic": "../escape"}, "topic: '../escape' holds '.'"),
    ({"topic": "a/b"}, "holds '/'"),
    ({"topic": "T\x01"}, "holds '\\x01'"),
    ({"topic": "\ud800"}, "holds '\\ud800'"),
    ({"topic": "T" * 32768}, "topic: 32768 characters; at most 32767"),
    ({"queue_id": True}, "queue_id: True is not an int"),
    ({"queue_id": -1}, "queue_id: -1 is not an int"),
    ({"queue_id": 2 ** 31}, "queue_id: 2147483648"),
    ({"queue_id": "0"}, "queue_id: '0'"),
    ({"body": "text"}, "body: must be bytes, got str"),
    ({"body": None}, "body: must be bytes, got NoneType"),
    ({"tags": 5}, "tags: must be a str or None, got int"),
    ({"keys": [1, 2]}, "keys: must be a str or a list of str; one is int"),
    ({"keys": 7}, "keys: must be a str or a list of str, got int"),
    ({"properties": [1]}, "properties: must be a dict of str to str, got list"),
    ({"properties": {1: 2}}, "properties: must be a dict of str to str; 1: 2 is not"),
    ({"flag": True}, "flag: True is not a 32-bit int"),
    ({"flag": 2 ** 40}, "flag: 1099511627776"),
    ({"born_host": "garbage"}, "born_host: 'garbage' is not 'address:port'"),
    ({"born_host": ("1.2.3.4", 70000)}, "born_host: port 70000 is not in 0..65535"),
    ({"born_host": ("1.2.3.4", "80")}, "born_host: port '80'"),
    ({"born_host": 80}, "born_host: must be (address, port) or 'address:port', got int"),
]


@pytest.mark.parametrize("change, words", BAD)
def test_each_wrong_argument_is_named(change, words):
    why = put_problem(**{**GOOD, **change})
    assert why is not None and words in why, why


def test_good_arguments_pass_and_topics_follow_rocketmqs_characters():
    assert put_problem(**GOOD) is None
    assert put_problem(**{**GOOD, "keys": "a b", "tags": "", "properties": {"K": "v"}, "flag": -1,
                          "born_host": "[::1]:9876", "body": memoryview(b"m")}) is None
    for topic in ("TopicTest", "%RETRY%group-1", "a|b", "orders_2026-11"):
        assert topic_problem(topic) is None
    assert host_problem(("10.0.0.1", 0), "h") is None and host_problem("10.0.0.1:65535", "h") is None


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.binary(max_size=8),
                 st.lists(st.integers() | st.text(max_size=3), max_size=3),
                 st.dictionaries(st.text(max_size=3) | st.integers(), st.text(max_size=3) | st.integers(), max_size=3),
                 st.tuples(st.text(max_size=5) | st.integers(), st.integers() | st.text(max_size=3))),
       st.sampled_from(sorted(GOOD)))
def test_any_value_in_any_field_gets_an_answer_never_an_exception(value, name):
    why = put_problem(**{**GOOD, name: value})
    assert why is None or why.startswith(name.split("_")[0] if name != "queue_id" else "queue_id")


def test_a_bad_put_on_the_leader_is_refused_and_nothing_is_written_and_bad_reads_find_nothing(tmp_path):
    with BrokerGroup(tmp_path) as g:
        lead = g.elected()
        assert g.put("T", 0, b"first", keys="k1").status is S.PUT_OK
        g.settle()
        end = g.c.servers[lead].store.ledger_end_index
        log = g.logs[lead]
        for change, words in BAD:
            args = {**GOOD, **change}
            f = log.put_message_async(args.pop("topic"), args.pop("queue_id"), args.pop("body"), **args)
            assert f.done()
            r = f.result()
            assert r.status is S.MESSAGE_ILLEGAL and words in r.detail and r.wrote_offset == -1, (change, r)
        for batch, words in ((None, "messages: must be a list of dicts, got NoneType"),
                             ("abc", "messages: must be a list of dicts, got str")):
            [r] = log.put_messages_async(batch).result()
            assert r.status is S.MESSAGE_ILLEGAL and r.detail == words
        g.c.run_for(100)
        assert g.c.servers[lead].store.ledger_end_index == end
        assert log.get_messages("T", 0, 0, 10)[1] == 1
        assert log.get_messages("../T", 0, 0, 10) == ([], 0) and log.get_messages("T", -1, 3, 10) == ([], 3)
        assert log.get_messages("T", 0, 0, 0) == ([], 0) and log.query_by_key("../T", "k1") == []
        with pytest.raises(ValueError, match="queue_offset: must be an int"):
            log.get_messages("T", 0, "0", 10)
