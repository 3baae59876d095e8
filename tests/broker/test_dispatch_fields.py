"""The reput service's parser (``message_codec.dispatch_fields``) against the full decoder: the
same messages accepted, the same fields, properties and stored body, nothing read outside the
given range."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker.message_codec import (PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, MessageFormatError,
                                          decode, dispatch_fields, dispatch_properties, encode_message,
                                          parse_properties, properties_bytes)

HOSTS = st.sampled_from([("10.0.0.7", 5555), ("::1", 9876), ("192.168.1.20", 0), ("fe80::1", 65535)])
#: property text pieces, separators included: duplicates, empty items, items with two \x01
PIECES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "TAGSX", "XKEYS", "a", "k1 k2", " ", "é", "",
                          "\x01", "\x02", "\x01\x01"])


def expected(raw: bytes):
    """What dispatch_fields must give for ``raw`` (less where the body lies), from the full
    decoder, and the stored body."""
    try:
        m = decode(raw, inflate=False)
    except MessageFormatError:
        return None
    if not m.topic:
        return None                    # the append hook's rule: a message has a topic
    p = m.properties
    return (m.topic, m.queue_id, m.queue_offset, m.store_timestamp, p.get(PROPERTY_TAGS), p.get(PROPERTY_KEYS),
            p.get(PROPERTY_UNIQ_KEY)), m.body


def with_properties(raw: bytes, props: bytes) -> bytes:
    """``raw`` (encoded without properties) with its properties section replaced by ``props``."""
    body = raw[:-2] + struct.pack(">h", len(props)) + props
    return struct.pack(">i", len(body)) + body[4:]


def check(raw: bytes, pad: bytes = b"\x02\x01") -> tuple | None:
    """The fields dispatch_fields gives (without the body's place), checked against the decoder."""
    got = dispatch_fields(raw)
    want = expected(raw)
    if want is None:
        assert got is None
        return None
    fields, body = want
    assert got[:7] == fields
    at, length = got[7:]
    assert raw[at:at + length] == body                 # the stored body, found without a second parse
    # inside a larger buffer (a run of records): only [start, end) is read
    framed = pad * 40 + raw + pad * 40
    assert dispatch_fields(framed, 80, 80 + len(raw)) == got
    assert dispatch_fields(bytearray(framed), 80, 80 + len(raw)) == got
    return got[:7]


@settings(max_examples=300, deadline=None)
@given(topic=st.one_of(st.text(min_size=1, max_size=20), st.text(alphabet="abc", min_size=120, max_size=200)),
       body=st.binary(max_size=200), queue_id=st.integers(0, 2**31 - 1), queue_offset=st.integers(0, 2**63 - 1),
       ts=st.integers(0, 2**62), born=HOSTS, store=HOSTS, items=st.lists(st.lists(PIECES, max_size=4), max_size=6),
       trailing=st.booleans(), compressed=st.booleans())
def test_the_parser_agrees_with_the_decoder_on_messages(topic, body, queue_id, queue_offset, ts, born, store, items,
                                                          trailing, compressed):
    try:
        raw = encode_message(topic=topic, body=body, queue_id=queue_id, queue_offset=queue_offset, born_timestamp=ts,
                             store_timestamp=ts + 1, born_host=born, store_host=store, sys_flag=int(compressed))
    except MessageFormatError:
        return                          # a topic the layout cannot hold (not what is tested here)
    text = "\x02".join("".join(item) for item in items) + ("\x02" if trailing else "")
    raw = with_properties(raw, text.encode())
    got = check(raw)
    assert got is not None
    assert got[:4] == (topic, queue_id, queue_offset, ts + 1)
    props = parse_properties(text)
    assert got[4:] == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"))


def test_v2_magic_ipv6_hosts_and_typical_properties():
    long_topic = "t" * 200                       # over 127 bytes: magic v2, a 2-byte topic length
    raw = encode_message(topic=long_topic, body=b"x" * 128, queue_id=3, queue_offset=41, store_timestamp=7,
                         born_host=("::1", 1), store_host=("fe80::1", 2),
                         properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0000070000"})
    assert check(raw) == (long_topic, 3, 41, 7, "TagA", "k1 k2", "0A0000070000")
    raw = encode_message(topic="T", body=b"", properties={"TAGS": "x", "OTHER": "y"})
    assert check(raw) == ("T", 0, 0, 0, "x", None, None)
    assert check(encode_message(topic="T", body=b"")) == ("T", 0, 0, 0, None, None, None)
    # a later TAGS item with two \x01 is dropped by the decoder: the earlier one counts
    raw = with_properties(encode_message(topic="T", body=b""), b"TAGS\x01a\x02TAGS\x01b\x01c\x02")
    assert check(raw)[4] == "a"
    # an empty topic is no message for dispatch (the decoder accepts it)
    raw = encode_message(topic="T", body=b"abc", properties={"TAGS": "x"})
    at = 88 + 3                                  # the v1 topic length byte, after a 3-byte body
    assert raw[at:at + 2] == b"\x01T"
    empty = struct.pack(">i", len(raw) - 1) + raw[4:at] + b"\x00" + raw[at + 2:]
    assert decode(empty).topic == "" and check(empty) is None
    # bytes after the properties, inside the claimed size: refused by both
    longer = raw + b"\x00\x00"
    assert check(struct.pack(">i", len(longer)) + longer[4:]) is None


@settings(max_examples=400, deadline=None)
@given(cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 399), st.integers(0, 255)), max_size=3),
       v6=st.booleans(), claim=st.booleans())
def test_damaged_messages_are_refused_exactly_when_the_decoder_refuses_them(cut, flips, v6, claim):
    raw = bytearray(encode_message(topic="TopicTest", body=b"x" * 50, born_host=("::1" if v6 else "1.2.3.4", 1),
                                   properties={"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "u"}))
    for at, value in flips:
        if at < len(raw):
            raw[at] = value
    raw = raw[:cut] if cut < len(raw) else raw
    if claim and len(raw) >= 4:
        raw[0:4] = struct.pack(">i", len(raw))   # a totalSize that agrees: the inner fields are tested
    check(bytes(raw))


def test_every_prefix_that_claims_its_own_length_is_refused_as_the_decoder_refuses_it():
    for born, store in [("1.2.3.4", "1.2.3.4"), ("::1", "1.2.3.4"), ("1.2.3.4", "::1"), ("::1", "::1")]:
        raw = encode_message(topic="TopicTest", body=b"x" * 5, born_host=(born, 1), store_host=(store, 2),
                             properties={"TAGS": "a"})
        for cut in range(4, len(raw)):
            assert check(struct.pack(">i", cut) + raw[4:cut]) is None
        assert check(raw) is not None


#: where the length and kind fields of the message of the next test lie (IPv4 hosts, 50-byte body)
FIELDS = {0: ">i", 4: ">i", 36: ">i", 84: ">i", 138: ">b", 148: ">h"}


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(sorted(FIELDS)), value=st.integers(-2**31, 2**31 - 1))
def test_a_wrong_length_or_flag_field_is_refused_exactly_as_the_decoder_refuses_it(field, value):
    raw = bytearray(encode_message(topic="TopicTest", body=b"x" * 50, properties={"TAGS": "a", "KEYS": "k1 k2"}))
    assert raw[138] == 9 and raw[148:150] == struct.pack(">h", len(raw) - 150)
    fmt = FIELDS[field]
    size = struct.calcsize(fmt)
    value = (value + 2 ** (8 * size - 1)) % 2 ** (8 * size) - 2 ** (8 * size - 1)
    struct.pack_into(fmt, raw, field, value)
    check(bytes(raw))


@given(st.binary(max_size=300))
def test_garbage_is_refused_or_read_as_the_decoder_reads_it(raw):
    check(raw)


#: property names: the three dispatch reads, their near misses and others; values with spaces,
#: separators, unicode and nothing at all
NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "TAGSX", "XKEYS", "UNIQ", "WAIT", "é", ""])
VALUES = st.one_of(st.sampled_from(["", " ", "k1 k2", " k1  k2 ", "tag", "\x01", "\x02", "a\x01b", "é ü"]),
                   st.text(max_size=12))


@settings(max_examples=500, deadline=None)
@given(items=st.lists(st.tuples(NAMES, VALUES), max_size=6), trailing=st.booleans())
def test_the_fast_property_read_agrees_with_the_full_parse(items, trailing):
    """``dispatch_properties`` (one match for the usual layout, else the dict) gives what
    ``parse_properties`` gives, for property texts in any order, with duplicates, separators
    inside values, empty values and unicode."""
    text = "\x02".join(f"{k}\x01{v}" for k, v in items) + ("\x02" if trailing and items else "")
    props = parse_properties(text)
    assert dispatch_properties(text) == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"))


@settings(max_examples=300, deadline=None)
@given(uniq=st.one_of(st.none(), VALUES), tags=st.one_of(st.none(), VALUES), keys=st.one_of(st.none(), VALUES),
       extra=st.dictionaries(st.sampled_from(["WAIT", "a", "é"]), VALUES, max_size=2), uniq_first=st.booleans())
def test_properties_as_the_broker_writes_them_are_read_back(uniq, tags, keys, extra, uniq_first):
    """The layout ``put_message`` writes (UNIQ_KEY among the caller's properties, then TAGS and
    KEYS), and any other: encoded by ``properties_bytes`` (or refused for a separator), read back
    by ``dispatch_properties`` as ``parse_properties`` reads them."""
    props = dict(extra)
    if uniq is not None and uniq_first:
        props = {"UNIQ_KEY": uniq, **props}
    for name, value in (("TAGS", tags), ("KEYS", keys)):
        if value is not None:
            props[name] = value
    if uniq is not None and not uniq_first:
        props["UNIQ_KEY"] = uniq
    try:
        raw = properties_bytes(props)
    except MessageFormatError as exc:
        assert any(sep in text for kv in props.items() for text in kv for sep in "\x01\x02")
        assert exc.field in ("property name", "property value")
        return
    text = raw.decode("utf-8")
    assert parse_properties(text) == props
    assert dispatch_properties(text) == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"))
    # and inside a whole message
    msg = encode_message(topic="T", body=b"x", properties=props)
    assert dispatch_fields(msg)[4:7] == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"))
