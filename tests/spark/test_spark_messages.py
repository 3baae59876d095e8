"""The broker view: RocketMQ messages (CommitLog layout) stored as DLedger entries."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.entry import MAGIC_NOOP
from dledger.spark.messages import (COMPRESSED_FLAG, MAGIC_V1, MAGIC_V2, decode_message,
                                    encode_message)
from dledger.store import DLedgerMmapFileStore

TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                      blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=150, deadline=None)
@given(topic=st.text(min_size=1, max_size=200).filter(lambda t: len(t.encode()) < 32000),
       body=st.binary(max_size=300), queue_id=st.integers(0, 2**31 - 1),
       queue_offset=st.integers(0, 2**63 - 1), ts=st.integers(0, 2**62),
       props=st.dictionaries(TEXT.filter(bool), TEXT, max_size=4),
       compressed=st.booleans(), v6=st.booleans())
def test_message_codec_round_trips(topic, body, queue_id, queue_offset, ts, props, compressed, v6):
    raw = encode_message(topic=topic, body=body, queue_id=queue_id, queue_offset=queue_offset,
                         born_timestamp=ts, store_timestamp=ts + 1,
                         born_host=("::1" if v6 else "10.0.0.7", 5555),
                         sys_flag=COMPRESSED_FLAG if compressed else 0, properties=props)
    m = decode_message(raw)
    assert m.error is None
    assert (m.topic, m.body, m.queue_id, m.queue_offset, m.born_timestamp, m.store_timestamp) == \
        (topic, body, queue_id, queue_offset, ts, ts + 1)
    assert m.properties == props and m.total_size == len(raw)
    assert m.magic_code == (MAGIC_V2 if len(topic.encode()) > 127 else MAGIC_V1)
    assert m.born_host == ("[::1]:5555" if v6 else "10.0.0.7:5555")


@given(st.binary(max_size=200))
def test_garbage_never_raises(raw):
    m = decode_message(raw)
    assert m.error is not None or m.total_size == len(raw)


def test_truncated_message_is_an_error_not_a_crash():
    raw = encode_message(topic="T", body=b"x" * 50)
    m = decode_message(raw[:-3])
    assert m.error and "totalSize" in m.error


def _broker_store(path):
    msgs = []
    for i in range(40):
        msgs.append(encode_message(
            topic="orders" if i % 2 else "payments", body=f"order-{i}".encode(), queue_id=i % 4,
            queue_offset=i // 4, physical_offset=1000 + i, born_timestamp=1_700_000_000_000 + i,
            store_timestamp=1_700_000_000_500 + i, born_host=("192.168.1.20", 40000 + i),
            store_host=("10.1.2.3", 10911),
            properties={"TAGS": f"tag{i % 3}", "KEYS": f"k{i} key{i}", "UNIQ_KEY": f"u{i}"}))
    st_ = DLedgerMmapFileStore.open(path, data_file_size=2048, index_file_size=32 * 64)
    st_.persist_term(1, None)
    st_.batch_append_as_leader([b""], magic=MAGIC_NOOP)   # the leader's first entry
    st_.batch_append_as_leader(msgs[:20])
    st_.batch_append_as_leader([b"not a message at all, just bytes " * 3])
    st_.batch_append_as_leader(msgs[20:])
    st_.close()
    return msgs


def test_broker_view_decodes_messages(dl, tmp_path):
    path = str(tmp_path / "dledger-broker")
    msgs = _broker_store(path)
    df = dl.read.format("dledger-messages").load(path)
    rows = sorted(df.collect(), key=lambda r: r["index"])
    assert len(rows) == 41                          # the NOOP is not a message
    good = [r for r in rows if r["error"] is None]
    assert len(good) == 40
    r = good[7]
    assert (r["index"], r["topic"], r["queue_id"], r["queue_offset"], r["physical_offset"]) == \
        (8, "orders", 3, 1, 1007)
    assert (r["tags"], r["keys"], r["properties"]["UNIQ_KEY"]) == ("tag1", "k7 key7", "u7")
    assert (r["born_timestamp"], r["store_timestamp"]) == (1_700_000_000_007, 1_700_000_000_507)
    assert (r["born_host"], r["store_host"]) == ("192.168.1.20:40007", "10.1.2.3:10911")
    assert bytes(r["body"]) == b"order-7" and r["total_size"] == len(msgs[7])
    assert r["magic_code"] == MAGIC_V1
    bad = [r for r in rows if r["error"] is not None]
    assert [b["index"] for b in bad] == [21] and "magic code" in bad[0]["error"]
    # analysis through Spark: messages per topic and tag, and index pushdown
    per_topic = {x["topic"]: x["count"]
                 for x in df.where("error IS NULL").groupBy("topic").count().collect()}
    assert per_topic == {"orders": 20, "payments": 20}
    tail = dl.read.format("dledger-messages").load(path).where("index >= 35")
    assert sorted(x["index"] for x in tail.collect()) == list(range(35, 42))
    assert tail.rdd.getNumPartitions() < df.rdd.getNumPartitions()


def test_message_struct_layout_matches_the_commitlog_offsets():
    # fixed offsets RocketMQ relies on: magic at 4, flag at 16, physical offset at 28,
    # store timestamp at 56 (IPv4 born host)
    raw = encode_message(topic="t", body=b"b", flag=7, physical_offset=123456789,
                         store_timestamp=987654321)
    assert struct.unpack_from(">i", raw, 4)[0] == MAGIC_V1
    assert struct.unpack_from(">i", raw, 16)[0] == 7
    assert struct.unpack_from(">q", raw, 28)[0] == 123456789
    assert struct.unpack_from(">q", raw, 56)[0] == 987654321
