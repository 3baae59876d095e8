"""The message codec: RocketMQ's CommitLog layout, round trips and named errors."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker.message_codec import (BORNHOST_V6_FLAG, MAGIC_V1, MAGIC_V2, PHYSICAL_OFFSET_POSITION,
                                          QUEUE_OFFSET_POSITION, STOREHOST_V6_FLAG, MessageFormatError, body_crc,
                                          decode, decode_message, encode_message, java_string_hash, locate,
                                          message_id, parse_message_id, store_timestamp_position,
                                          tags_hash_code)

TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
               max_size=20)
HOSTS = st.sampled_from([("10.0.0.7", 5555), ("::1", 9876), ("192.168.1.20", 0), ("fe80::1", 65535)])


@settings(max_examples=200, deadline=None)
@given(topic=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200)
       .filter(lambda t: len(t.encode()) < 32000),
       body=st.binary(max_size=300), queue_id=st.integers(0, 2**31 - 1), queue_offset=st.integers(0, 2**63 - 1),
       physical=st.integers(0, 2**63 - 1), ts=st.integers(0, 2**62), born=HOSTS, store=HOSTS,
       tags=TEXT, keys=st.lists(TEXT.filter(lambda k: k and " " not in k), max_size=3), uniq=TEXT,
       flag=st.integers(-2**31, 2**31 - 1))
def test_every_field_round_trips(topic, body, queue_id, queue_offset, physical, ts, born, store, tags, keys,
                                 uniq, flag):
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = " ".join(keys)
    if uniq:
        props["UNIQ_KEY"] = uniq
    raw = encode_message(topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
                         physical_offset=physical, born_timestamp=ts, store_timestamp=ts + 1, born_host=born,
                         store_host=store, properties=props)
    m = decode(raw)
    assert (m.topic, m.body, m.queue_id, m.flag, m.queue_offset, m.physical_offset) == \
        (topic, body, queue_id, flag, queue_offset, physical)
    assert (m.born_timestamp, m.store_timestamp, m.total_size) == (ts, ts + 1, len(raw))
    assert m.magic_code == (MAGIC_V2 if len(topic.encode()) > 127 else MAGIC_V1)
    assert bool(m.sys_flag & BORNHOST_V6_FLAG) == (":" in born[0])
    assert bool(m.sys_flag & STOREHOST_V6_FLAG) == (":" in store[0])
    assert m.born_host == (f"[{born[0]}]:{born[1]}" if ":" in born[0] else f"{born[0]}:{born[1]}")
    assert m.properties == props and m.tags == (tags or None) and m.key_list == keys
    assert m.uniq_key == (uniq or None) and m.body_crc == body_crc(body)
    assert locate(raw) == (topic, queue_id, store_timestamp_position(m.sys_flag))
    assert struct.unpack_from(">q", raw, QUEUE_OFFSET_POSITION)[0] == queue_offset
    assert struct.unpack_from(">q", raw, PHYSICAL_OFFSET_POSITION)[0] == physical
    assert struct.unpack_from(">q", raw, store_timestamp_position(m.sys_flag))[0] == ts + 1


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, 400), v6=st.booleans())
def test_a_truncated_message_is_an_error_naming_a_field_never_a_struct_error(cut, v6):
    raw = encode_message(topic="TopicTest", body=b"x" * 50, born_host=("::1" if v6 else "1.2.3.4", 1),
                         properties={"TAGS": "a", "KEYS": "k1 k2"})
    cut = min(cut, len(raw) - 1)
    with pytest.raises(MessageFormatError) as err:
        decode(raw[:cut])
    assert err.value.field == "totalSize" and str(err.value).startswith("totalSize: ")
    # a message whose totalSize claims the cut length: the field that runs out is named
    short = struct.pack(">i", cut) + raw[4:cut]
    if cut >= 48:
        with pytest.raises(MessageFormatError) as err:
            decode(short)
        assert err.value.field in {"bornHost", "storeTimestamp", "storeHost", "reconsumeTimes", "bodyLength",
                                   "topicLength", "propertiesLength"}
        assert decode_message(short).error == str(err.value)


@given(st.binary(max_size=300))
def test_garbage_gives_a_named_error_or_a_message(raw):
    try:
        m = decode(raw)
    except MessageFormatError as exc:
        assert exc.field and str(exc).startswith(exc.field)
    else:
        assert m.total_size == len(raw)


def test_bad_magic_and_bad_values_name_their_field():
    raw = bytearray(encode_message(topic="T", body=b"b"))
    raw[4:8] = b"\x00\x00\x00\x01"
    with pytest.raises(MessageFormatError, match="^magicCode: "):
        decode(bytes(raw))
    with pytest.raises(MessageFormatError, match="^topic: is empty"):
        encode_message(topic="", body=b"")
    with pytest.raises(MessageFormatError, match="^properties: 40000 bytes"):
        encode_message(topic="T", body=b"", properties={"P": "v" * 39997})
    with pytest.raises(MessageFormatError, match="^property value: "):
        encode_message(topic="T", body=b"", properties={"P": "a\x02b"})
    with pytest.raises(MessageFormatError, match="^bornHost: "):
        encode_message(topic="T", body=b"", born_host=("not-an-ip", 1))


def test_tags_hash_code_is_javas_string_hash_code():
    # values of String.hashCode() computed by the JVM
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("\U0001F600") == 1772899      # a surrogate pair: two UTF-16 units
    assert tags_hash_code(None) == tags_hash_code("") == 0


def test_offset_message_ids_carry_store_host_and_offset():
    mid = message_id("10.1.2.3:10911", 123456)
    assert mid == "0A010203" + "00002A9F" + "000000000001E240"
    assert parse_message_id(mid) == ("10.1.2.3:10911", 123456)
    assert parse_message_id(message_id("[::1]:7", 9)) == ("[::1]:7", 9)
    with pytest.raises(MessageFormatError, match="^msg_id: "):
        parse_message_id("XYZ")
    with pytest.raises(MessageFormatError, match="^msg_id: 3 bytes"):
        parse_message_id("ABCDEF")


def test_encoding_refuses_what_the_layout_cannot_hold_whatever_it_kept_from_earlier_calls():
    """The topic field and the packed hosts are kept per value: a bad value is refused every
    time, a good one gives the same bytes as the first time."""
    first = encode_message(topic="T", body=b"b", store_host="10.0.0.1:10911", properties={"TAGS": "a"})
    for _ in range(2):
        with pytest.raises(MessageFormatError, match="^topic: 32768 bytes"):
            encode_message(topic="t" * 32768, body=b"")
        with pytest.raises(MessageFormatError, match="^storeHost: "):
            encode_message(topic="T", body=b"", store_host="nowhere:1")
        with pytest.raises(MessageFormatError, match="^property name: "):
            encode_message(topic="T", body=b"", properties={"a\x01": "v"})
        with pytest.raises(TypeError):
            encode_message(topic="T", body=b"", properties={"P": 1})
        assert encode_message(topic="T", body=b"b", store_host="10.0.0.1:10911", properties={"TAGS": "a"}) == first
    # a host given as a list (not hashable, so not kept) is refused, as every call refused it
    with pytest.raises(MessageFormatError, match="^bornHost: "):
        encode_message(topic="T", body=b"b", born_host=["10.0.0.2", 1])
