"""The encoding of puts: the compiled loop of ``put_messages`` (``encode_puts``) against its
reference (``PutEncoder.encode``), and the reference against its definition.

Any batch, of usual messages or of odd values of every argument (other types, bools for ints,
values out of range, separators, lone surrogates, TAGS and KEYS among the caller's properties,
born hosts seen before or not, hosts a dict finds under another key, a limit the message
passes), gives the same bytes or the same refusal both ways; the compiled loop takes the usual
messages itself, and hands every other one back."""

import struct
import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dledger.broker import put_checks, put_encode, speedups
from dledger.broker.message_codec import MAGIC_V2, decode, encode_message
from dledger.broker.put_encode import PutEncoder
from dledger.broker.put_result import PutMessageStatus

compiled = speedups.compiled
STORE = ("10.0.0.7", 10911)
LIMIT = 1 << 22

TOPICS = st.sampled_from(["T", "TopicA", "a" * 127, "b" * 128, "", "bad topic", "é", "T%|_-9"]) | st.just(7)
TEXTS = st.sampled_from(["", "a", "tag", "k1 k2", "é𝄞", "x\x01", "y\x02", "\ud800", "TAGS", "KEYS", " "])
VALUES = st.one_of(
    st.just(None), st.just(True), st.integers(-2**40, 2**40), st.sampled_from([0, 2**31 - 1, 2**31, -1, -2**31]),
    TEXTS, st.binary(max_size=8), st.just(bytearray(b"ba")), st.just(memoryview(b"mv")),
    st.lists(TEXTS, max_size=3), st.tuples(TEXTS), st.just({"a", "b"}), st.just(1.0))
HOSTS = st.sampled_from([None, ("127.0.0.1", 80), ("::1", 9876), "10.1.2.3:4", "[fe80::1]:65535", ("127.0.0.1", True),
                         ("127.0.0.1", 80.0), ("127.0.0.1", 70000), ["127.0.0.1", 80], "nohost", ("x", 1, 2)])
PROPERTIES = st.one_of(st.none(), st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "", "b\x01"]),
                                                  TEXTS, max_size=4),
                       st.just({"a": 1}), st.just({1: "a"}), st.just([("a", "b")]), st.just({"p": "v" * 40000}))


@st.composite
def message(draw) -> dict:
    """put_message's arguments: usual values mostly, any value now and then."""
    m = {"topic": draw(TOPICS), "body": draw(st.binary(max_size=64))}
    odd = draw(st.integers(0, 3)) == 0
    for name, usual in (("queue_id", st.integers(0, 2**31 - 1)), ("tags", st.none() | TEXTS),
                        ("keys", st.lists(TEXTS, max_size=3) | TEXTS | st.tuples(TEXTS, TEXTS)),
                        ("properties", PROPERTIES), ("born_host", HOSTS), ("flag", st.integers(-2**31, 2**31 - 1))):
        if draw(st.booleans()):
            m[name] = draw(VALUES if odd and draw(st.booleans()) else usual)
    if odd and draw(st.booleans()):
        m["body"] = draw(VALUES)
    if odd and draw(st.integers(0, 5)) == 0:
        m[draw(st.sampled_from(["nope", 3]))] = 1
    if odd and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([["topic"], None, "m"]))
    return m


def both(messages, limit=LIMIT, born_ms=1_700_000_000_123):
    """The batch encoded by the reference alone, then (the hosts it packed known) by the compiled
    loop, and by the compiled loop on a fresh encoder; all three must agree."""
    ref = PutEncoder(STORE).encode_batch(messages, born_ms, limit, compiled_loop=False)
    warm = PutEncoder(STORE)
    warm.encode_batch(messages, born_ms, limit, compiled_loop=False)
    fast = warm.encode_batch(messages, born_ms, limit)
    cold = PutEncoder(STORE).encode_batch(messages, born_ms, limit)
    assert fast == ref
    assert cold == ref
    return ref


def test_this_build_has_the_compiled_loop_and_uses_it():
    assert compiled is not None and put_encode._encode_puts is compiled.encode_puts


@settings(max_examples=600, deadline=None)
@given(messages=st.lists(message(), max_size=6), limit=st.sampled_from([LIMIT, 200, 140]))
@example(messages=[{"topic": "T", "body": b"x", "tags": "t", "keys": ["k1", "k2"],
                    "properties": {"KEYS": "old", "UNIQ_KEY": "u", "TAGS": "old"}}], limit=LIMIT)
@example(messages=[{"topic": "T", "body": b"x", "keys": "", "tags": ""}], limit=LIMIT)
@example(messages=[{"topic": "T", "body": b"x", "born_host": ("127.0.0.1", 1)},
                   {"topic": "T", "body": b"x", "born_host": ("127.0.0.1", True)}], limit=LIMIT)
def test_the_compiled_loop_gives_the_references_bytes_and_refusals(messages, limit):
    both(messages, limit)


def test_the_compiled_loop_takes_usual_messages_itself():
    """A batch of usual messages (topics found good, a born host seen before) is encoded by the
    compiled loop alone: it answers the batch's length and its bytes are the reference's."""
    enc = PutEncoder(STORE)
    msgs = [{"topic": f"T{i % 3}", "queue_id": i, "body": bytes([i]) * i, "tags": "t" if i % 2 else None,
             "keys": [f"k{i}", "x"] if i % 3 else f"k{i}", "properties": {"UNIQ_KEY": f"u{i}"} if i % 4 else None,
             "born_host": ("10.9.8.7", 1234) if i % 5 else None, "flag": -i} for i in range(40)]
    ref = enc.encode_batch(msgs, 5, LIMIT, compiled_loop=False)     # finds the topics, packs the host
    out: list[bytes] = []
    taken = compiled.encode_puts(msgs, 0, 5, LIMIT, put_checks.GOOD_TOPICS, enc.hosts, enc._store_packed,
                                 zlib.crc32, out)
    assert taken == len(msgs)
    assert out == ref


def test_the_compiled_loop_hands_back_what_it_does_not_know():
    """A topic not found good yet, a born host not packed yet, a bytearray body, a set of keys,
    a bool queue id: each stops the loop at its index; the reference then takes it."""
    enc = PutEncoder(STORE)
    enc.encode_batch([{"topic": "Known", "body": b"b"}], 0, LIMIT)
    usual = {"topic": "Known", "body": b"b"}
    for odd in ({"topic": "NeverSeenBefore", "body": b"b"}, {"topic": "Known", "body": b"b", "born_host": ("1.2.3.4", 5)},
                {"topic": "Known", "body": bytearray(b"b")}, {"topic": "Known", "body": b"b", "keys": {"k"}},
                {"topic": "Known", "body": b"b", "queue_id": True}, {"topic": "Known", "body": b"b", "tags": "\ud800"}):
        out: list[bytes] = []
        assert compiled.encode_puts([usual, odd, usual], 0, 1, LIMIT, put_checks.GOOD_TOPICS, enc.hosts,
                                    enc._store_packed, zlib.crc32, out) == 1, odd
        assert len(out) == 1


@pytest.mark.parametrize("loop", ["compiled", "reference"])
def test_a_batch_encodes_to_messages_that_decode_to_its_arguments(loop):
    enc = PutEncoder(STORE)
    msgs = [{"topic": "T" * 130, "queue_id": 3, "body": b"body", "tags": "tg", "keys": ["a", "b"],
             "properties": {"UNIQ_KEY": "u1"}, "born_host": "[::1]:7", "flag": 9}] * 2
    raws = enc.encode_batch(msgs, 42, LIMIT, compiled_loop=loop == "compiled")
    assert raws[0] == raws[1]
    m = decode(raws[1])
    assert struct.unpack_from(">i", raws[1], 4)[0] == MAGIC_V2          # a topic over 127 bytes
    assert (m.topic, m.queue_id, m.body, m.flag, m.born_timestamp) == ("T" * 130, 3, b"body", 9, 42)
    assert m.properties == {"UNIQ_KEY": "u1", "TAGS": "tg", "KEYS": "a b"}
    assert (m.born_host, m.store_host) == ("[::1]:7", "10.0.0.7:10911")
    assert raws[1] == encode_message(topic="T" * 130, body=b"body", queue_id=3, flag=9, born_timestamp=42,
                                     born_host="[::1]:7", store_host=STORE, properties=m.properties)


@pytest.mark.parametrize("where", ["tags", "keys", "properties"])
def test_text_utf8_cannot_hold_is_refused_naming_it_never_raised(where):
    """A lone surrogate (a str UTF-8 cannot encode) escaped as UnicodeEncodeError before."""
    value = {"tags": "\ud800", "keys": ["ok", "\udc00"], "properties": {"a": "\ud800"}}[where]
    res = both([{"topic": "T", "body": b"x", where: value}])
    assert res.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert "messages[0]: property value" in res.detail and "not encodable as UTF-8" in res.detail


def test_the_loop_refuses_the_same_message_the_reference_refuses():
    msgs = [{"topic": "T", "body": b"x"}, {"topic": "T", "body": b"x", "queue_id": -1}, {"topic": "T", "body": b"x"}]
    res = both(msgs)
    assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and res.detail.startswith("messages[1]: queue_id")


USUAL = {"topic": "T", "queue_id": 1, "body": b"b" * 10, "tags": "t", "keys": ["k"], "properties": {"P": "v"},
         "born_host": ("127.0.0.1", 1), "flag": 0}
#: one argument changed to a value at or past the edge of what it may be
EDGES = [("queue_id", 0), ("queue_id", 2**31 - 1), ("queue_id", 2**31), ("queue_id", -1), ("queue_id", True),
         ("queue_id", 2**64), ("flag", -2**31), ("flag", 2**31 - 1), ("flag", 2**31), ("flag", -2**31 - 1),
         ("flag", False), ("keys", []), ("keys", ()), ("keys", ""), ("keys", [""]), ("keys", ["a", "", "b"]),
         ("keys", None), ("keys", ("a", 1)), ("tags", ""), ("tags", None), ("tags", "\x02"), ("tags", 3),
         ("properties", {}), ("properties", {"TAGS": "mine"}), ("properties", {"KEYS": "mine", "z": ""}),
         ("properties", {"": ""}), ("properties", {"p": "v" * 32700}), ("properties", {"p": "v" * 32762}),
         ("properties", {"\x01": "v"}), ("properties", {"p": "\ud800"}), ("properties", {"\udfff": "v"}),
         ("topic", "a" * 127), ("topic", "a" * 128), ("topic", "a" * 32767), ("topic", "a" * 32768),
         ("born_host", ("127.0.0.1", True)), ("born_host", ("127.0.0.1", 1.0)), ("born_host", "127.0.0.1:1"),
         ("born_host", ("::1", 1)), ("born_host", None), ("body", b""), ("body", bytearray(b"b")),
         ("body", b"x" * 70000)]


@pytest.mark.parametrize("name,value", EDGES, ids=[f"{n}={str(v)[:12]!r}" for n, v in EDGES])
def test_an_argument_at_its_edge_gives_the_references_answer(name, value):
    """The usual message around one whose argument lies at (or just past) its edge, after the
    same batch without it (its topic found good, its born host packed: the compiled loop sees
    it)."""
    odd = {**USUAL, name: value}
    both([USUAL, {**odd, "born_host": ("127.0.0.1", 1)} if name != "born_host" else USUAL])
    both([USUAL, odd, USUAL])


@pytest.mark.parametrize("over", [0, 1])
def test_a_message_one_byte_over_the_limit_is_refused_both_ways(over):
    size = len(PutEncoder(STORE).encode_batch([USUAL], 0, LIMIT, compiled_loop=False)[0])
    res = both([USUAL, USUAL], limit=size - over)
    if over:
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL and f"at most {size - 1}" in res.detail
    else:
        assert len(res) == 2


def test_the_compiled_loop_refuses_a_packed_host_of_a_wrong_shape():
    """The hosts table holds what the reference packed; a value of another shape is not used."""
    put_checks.topic_problem("T")
    for packed in ((b"abc", 1), (b"abcd", 70000), (b"abcd", True), [b"abcd", 1], (b"abcd",)):
        out: list[bytes] = []
        taken = compiled.encode_puts([{"topic": "T", "body": b"", "born_host": ("h", 1)}], 0, 0, LIMIT,
                                     put_checks.GOOD_TOPICS, {("h", 1): packed}, (b"\x7f\0\0\1", 1), zlib.crc32, out)
        assert (taken, out) == (0, []), packed
