"""The broker's compiled hot loops (``_speedups.c``) against their Python references.

The dispatch scan gives the reference's items on any run of records (messages of every layout,
properties with separators and non-ASCII text, bytes that are not messages, damaged messages),
and the reference's items are what the definitions give (``dispatch_fields``, Java's hash of
``topic#key``); ``locate`` is ``message_codec.locate``; the key index's writes leave the same
file bytes and fields. The compiled module is what this build uses, and the references are what
runs without it."""

import logging
import os
import random
import struct
import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dledger.broker import append_stamps, dispatch_scan, speedups
from dledger.broker.dispatch_scan import MessageScanner
from dledger.broker.index_file import IndexFile, key_hash
from dledger.broker.message_codec import (MAGIC_V1, QUEUE_OFFSET_POSITION, SYS_FLAG_POSITION, MessageFormatError,
                                          dispatch_fields, encode_message, java_string_hash, locate,
                                          store_timestamp_position, tags_hash_code)
from dledger.entry import MAGIC_CONFIG_CHANGE, MAGIC_NOOP, MAGIC_NORMAL, DLedgerEntry, encode

compiled = speedups.compiled

HOSTS = st.sampled_from([("10.0.0.7", 5555), ("::1", 9876), ("192.168.1.20", 0), ("fe80::1", 65535)])
#: property text pieces: the three names, look-alikes, separators, spaces, non-ASCII (two- to
#: four-byte UTF-8, a character outside the BMP: two UTF-16 units in Java's hash)
PIECES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "TAGSX", "XKEYS", "a", "k1 k2", " ", "é", "",
                          "\x01", "\x02", "\x01\x01", "€", "𝄞", "  x"])
TOPICS = st.one_of(st.text(min_size=1, max_size=12), st.sampled_from(["T", "TopicA", "é𝄞"]),
                   st.text(alphabet="ab", min_size=128, max_size=140))


def with_properties(raw: bytes, props: bytes) -> bytes:
    """``raw`` (encoded without properties) with its properties section replaced by ``props``."""
    body = raw[:-2] + struct.pack(">h", len(props)) + props
    return struct.pack(">i", len(body)) + body[4:]


@st.composite
def messages(draw) -> bytes:
    topic = draw(TOPICS)
    try:
        raw = encode_message(topic=topic, body=draw(st.binary(max_size=40)), queue_id=draw(st.integers(0, 2**31 - 1)),
                             queue_offset=draw(st.integers(0, 2**63 - 1)), store_timestamp=draw(st.integers(0, 2**62)),
                             born_host=draw(HOSTS), store_host=draw(HOSTS))
    except MessageFormatError:
        raw = encode_message(topic="T", body=b"b")
    items = draw(st.lists(st.lists(PIECES, max_size=4), max_size=6))
    text = "\x02".join("".join(item) for item in items) + draw(st.sampled_from(["", "\x02"]))
    props = text.encode()
    if draw(st.integers(0, 9)) == 0:                          # bytes that are not UTF-8
        props = props + draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82"]))
    return with_properties(raw, props)


@st.composite
def bodies(draw) -> tuple[int, bytes]:
    """An entry's magic and body: mostly messages, some damaged, some not messages at all."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from([MAGIC_NOOP, MAGIC_CONFIG_CHANGE])), draw(st.binary(max_size=100))
    if kind == 1:
        return MAGIC_NORMAL, draw(st.binary(max_size=120))
    if kind == 2:
        return MAGIC_NORMAL, b""
    raw = draw(messages())
    if kind == 3:                                        # a damaged byte anywhere
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    elif kind == 4:                                      # cut short or run on
        raw = raw[:draw(st.integers(0, len(raw)))] if draw(st.booleans()) else raw + b"\0\x02"
    elif kind == 5:                                      # a topic that is not UTF-8
        raw = encode_message(topic="QZQ", body=b"b").replace(b"QZQ", b"Q\xffQ")
    return MAGIC_NORMAL, raw


def run_of(items: list[tuple[int, bytes]], first_index: int = 7, first_pos: int = 4096) -> bytes:
    out, pos = [], first_pos
    for k, (magic, body) in enumerate(items):
        record = encode(DLedgerEntry(body, magic, first_index + k, 3, pos))
        out.append(record)
        pos += len(record)
    return b"".join(out)


def reference(records, first_index: int = 7) -> list:
    return list(MessageScanner()(records, first_index))


def test_this_build_has_the_compiled_scan_and_uses_it():
    """The suite's install (``make test``) compiles it; without it, every comparison below would
    compare the reference with itself."""
    assert compiled is not None, "the broker's compiled hot loops did not build (is there a C compiler?)"
    assert speedups.IMPLEMENTATION == "C"
    assert dispatch_scan.new_scanner() is compiled.scan_messages
    assert append_stamps.locate is compiled.locate and append_stamps.stamp_messages is compiled.stamp_messages


@settings(max_examples=400, deadline=None)
@given(items=st.lists(bodies(), max_size=12), first_index=st.integers(0, 2**40))
@example(items=[(MAGIC_NORMAL, encode_message(topic="T", body=b"x", properties={"TAGS": "a", "KEYS": "k1 k2",
                                                                              "UNIQ_KEY": "u"}))], first_index=0)
def test_the_compiled_scan_gives_the_references_items(items, first_index):
    records = run_of(items, first_index)
    want = reference(records, first_index)
    assert len(want) == len(items)
    assert compiled.scan_messages(records, first_index) == want
    assert compiled.scan_messages(bytearray(records), first_index) == want
    assert compiled.scan_messages(memoryview(records), first_index) == want


@settings(max_examples=300, deadline=None)
@given(raw=messages())
def test_the_references_items_are_what_the_definitions_give(raw):
    """Each item: ``dispatch_fields``' fields, ``tags_hash_code`` of TAGS, ``key_hash`` of
    ``topic#key`` for UNIQ_KEY then each key of KEYS split on spaces (empty ones dropped), and
    the stored body where ``body_at`` says; the compiled scan agrees."""
    records = run_of([(MAGIC_NORMAL, raw)], 0, 100)
    (item,) = reference(records, 0)
    assert compiled.scan_messages(records, 0) == [item]
    index, pos, size, topic, queue_id, queue_offset, ts, code, hashes, at, length = item
    assert (index, pos, size) == (0, 100, len(records))
    found = dispatch_fields(raw)
    if found is None:
        assert item[3:] == (None, 0, 0, 0, 0, (), 0, 0)
        return
    f_topic, f_queue, f_offset, f_ts, tags, keys, uniq, f_at, f_length = found
    assert (topic, queue_id, queue_offset, ts) == (f_topic, f_queue, f_offset, f_ts)
    assert code == tags_hash_code(tags)
    named = ([uniq] if uniq else []) + [k for k in (keys or "").split(" ") if k]
    assert hashes == tuple(key_hash(f"{topic}#{k}") for k in named)
    assert records[at:at + length] == raw[f_at:f_at + f_length]


def test_java_hashes_of_keys_outside_the_basic_plane_and_of_hashes_that_overflow():
    """Two UTF-16 units for a character beyond U+FFFF (Java hashes units, not code points), and
    the key whose hash is -2**31 (its absolute value does not fit: 0)."""
    # a key whose Java hash of "T#key" is exactly -2**31: seven CJK characters (U+4E00 + a
    # base-31 digit each) whose digits make up what the prefix leaves
    prefix = (ord("T") * 31 + ord("#")) & 0xFFFFFFFF
    base = sum(0x4E00 * 31 ** j for j in range(7))
    rest = (0x80000000 - prefix * 31 ** 7 - base) % (1 << 32)
    digits = [(rest // 31 ** j) % 31 for j in reversed(range(7))]
    overflow_key = "".join(chr(0x4E00 + d) for d in digits)
    raw = encode_message(topic="T", body=b"b", properties={"KEYS": f"𝄞 {overflow_key} é€"})
    records = run_of([(MAGIC_NORMAL, raw)])
    (item,) = compiled.scan_messages(records, 7)
    assert item == reference(records)[0]
    assert item[8] == (key_hash("T#𝄞"), 0, key_hash("T#é€"))
    assert java_string_hash(f"T#{overflow_key}") == -2**31 and key_hash(f"T#{overflow_key}") == 0


def test_a_run_whose_record_lengths_do_not_add_up_is_refused_with_its_place():
    good = run_of([(MAGIC_NORMAL, encode_message(topic="T", body=b"x"))] * 2)
    size = len(good) // 2
    for damaged, words in ((good[:size] + struct.pack(">ii", 1, 20) + good[size + 8:], "claims size 20"),
                           (good[:size] + struct.pack(">ii", 1, 10**6) + good[size + 8:], "claims size 1000000"),
                           (good + b"\0" * 10, "10 bytes left"),
                           (good[:size] + struct.pack(">ii", 1, -5) + good[size + 8:], "claims size -5")):
        with pytest.raises(ValueError, match=words) as info:
            compiled.scan_messages(damaged, 7)
        assert "record 8" in str(info.value) or "record 9" in str(info.value)


@settings(max_examples=300, deadline=None)
@given(raw=messages(), base=st.sampled_from([0, 48]), cut=st.integers(0, 3), damage=st.integers(0, 400))
def test_the_compiled_locate_is_the_references(raw, base, cut, damage):
    buf = bytearray(b"\x07" * base + raw)
    if damage < len(buf):
        buf[damage] ^= 0x5A
    if cut:
        del buf[-cut:]
    with memoryview(buf) as view:
        assert compiled.locate(view, base) == locate(view, base)
    assert compiled.locate(bytes(buf), base) == locate(bytes(buf), base)
    assert compiled.locate(b"", 0) is None and compiled.locate(raw, len(raw) + 1) is None


def test_locate_refuses_a_zero_length_topic_and_a_negative_body_length():
    for raw in (zero_length_topic(), negative_body_length()):
        assert locate(raw) is None and compiled.locate(raw) is None
        framed = bytearray(b"\0" * 48 + raw)
        assert compiled.locate(framed, 48) is None
        records = run_of([(MAGIC_NORMAL, raw)])
        assert compiled.scan_messages(records, 7) == reference(records) and reference(records)[0][3] is None
        buf, stamped = bytearray(records), {}
        assert compiled.stamp_messages(buf, [0], [len(records)], [0], {}, stamped, 5) == 0 and stamped == {}
        assert buf == records


def test_random_bytes_never_crash_the_compiled_scan():
    """A fuzz of whole runs whose records hold random bytes at random places: every answer is
    the reference's."""
    rng = random.Random(11)
    seeds = [encode_message(topic="TopicA", body=b"body", properties={"TAGS": "t", "KEYS": "a b", "UNIQ_KEY": "u"}),
             encode_message(topic="t" * 130, body=b"", born_host=("::1", 1))]
    for _ in range(3000):
        items = []
        for _k in range(rng.randint(1, 5)):
            raw = bytearray(rng.choice(seeds))
            for _j in range(rng.randint(0, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            items.append((MAGIC_NORMAL, bytes(raw)))
        records = run_of(items)
        assert compiled.scan_messages(records, 7) == reference(records)


def test_without_the_compiled_module_or_when_told_the_references_run(caplog, monkeypatch):
    env = dict(os.environ, DLEDGER_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", "from dledger.broker import append_stamps as a, dispatch_scan as d, "
                          "index_file as i, speedups as s; print(s.IMPLEMENTATION, type(d.new_scanner()).__name__, "
                          "a.locate.__module__, a.stamp_messages.__name__, i._compiled)"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Python", "MessageScanner", "dledger.broker.message_codec", "python_stamp_messages",
                                  "None"]
    # a compiled module of another interface (built from another version of the source)
    monkeypatch.setattr(compiled, "ABI_VERSION", speedups.ABI_VERSION + 1)
    with caplog.at_level(logging.WARNING, logger="dledger.broker.speedups"):
        assert speedups.load() is None
    assert "reinstall to rebuild them" in caplog.text
    monkeypatch.setattr(compiled, "ABI_VERSION", speedups.ABI_VERSION)
    assert speedups.load() is compiled


def test_a_v1_message_is_what_a_one_byte_topic_length_makes():
    raw = encode_message(topic="T", body=b"x")
    assert struct.unpack_from(">i", raw, 4)[0] == MAGIC_V1
    records = run_of([(MAGIC_NORMAL, raw)])
    assert compiled.scan_messages(records, 7)[0][3] == "T"


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 2**31 - 1) | st.sampled_from([0, 7, 13, 2**31 - 1]),
                                           st.integers(0, 2**63 - 1),
                                           st.integers(-5, 3) | st.integers(1_764_000_000_000, 1_764_000_900_000)),
                                 max_size=12), max_size=5),
       slots=st.sampled_from([1, 7, 64]), index_num=st.sampled_from([2, 5, 40]), start=st.integers(0, 3),
       count=st.sampled_from([0, 1, 1, 3]), begin=st.sampled_from([0, -7, 1_764_000_000_000, 5]),
       stale=st.lists(st.integers(-3, 50), max_size=8), far=st.booleans())
def test_the_compiled_key_index_writes_what_the_reference_writes(tmp_path_factory, batches, slots, index_num, start,
                                                                count, begin, stale, far):
    """Batches of ``(hash, offset, timestamp)`` put into two files of the same shape and the
    same starting state (a count of 0, 1 or more, a begin timestamp or none, slots holding stale
    numbers from before a cut), one with each loop, from an offset into each batch, until the
    files are full: the same counts back, the same fields, the same bytes (entries, slots,
    header). ``far``: timestamps 100 years on (the time difference is capped)."""
    d = tmp_path_factory.mktemp("index")
    files = [IndexFile(str(d / name), slots, index_num) for name in ("c", "python")]
    if far:
        batches = [[(h, off, ts + 100 * 365 * 86_400_000) for h, off, ts in work] for work in batches]
    for f in files:
        f.index_count, f.begin_timestamp = min(count, index_num), begin
        for k, value in enumerate(stale):
            struct.pack_into(">i", f.mm, 40 + (k % slots) * 4, value)
    try:
        for work in batches:
            taken = (files[0].put_hashes(work, start), files[1]._put_hashes_python(work, start))
            assert taken[0] == taken[1]
            for f in files:
                f.write_header()
            fields = [(f.index_count, f.hash_slot_count, f.begin_timestamp, f.end_timestamp, f.begin_phy_offset,
                       f.end_phy_offset) for f in files]
            assert fields[0] == fields[1]
            assert files[0].mm[:] == files[1].mm[:]
    finally:
        for f in files:
            f.close()


def test_the_compiled_key_index_refuses_what_does_not_fit_and_writes_nothing(tmp_path):
    f = IndexFile(str(tmp_path / "i"), 8, 10)
    try:
        before = f.mm[:]
        with pytest.raises(OverflowError, match="key hash 4294967296"):
            compiled.put_index_entries(f.mm, f.slots, f._entries_base, f.index_count, f.index_num, 0, 0,
                                       [(2**32, 1, 1)], 0)
        with pytest.raises(ValueError, match="run past"):
            compiled.put_index_entries(f.mm, f.slots, f._entries_base, f.index_count, 10**6, 0, 0,
                                       [(1, 1, 1)] * 20, 0)
        with pytest.raises(TypeError, match="key_hash, phy_offset, store_timestamp"):
            compiled.put_index_entries(f.mm, f.slots, f._entries_base, f.index_count, f.index_num, 0, 0, [(1, 2)], 0)
        assert f.mm[:] == before
    finally:
        f.close()


@settings(max_examples=300, deadline=None)
@given(items=st.lists(bodies(), min_size=1, max_size=10), now=st.integers(0, 2**62),
       known=st.dictionaries(st.tuples(st.sampled_from(["T", "TopicA", "QZQ"]), st.integers(0, 3)),
                             st.integers(0, 2**40), max_size=4))
def test_the_compiled_stamps_are_the_references(items, now, known):
    """A batch of records (messages, damaged messages, other bodies) stamped by each: the same
    bytes, table, stamps and count; each message's stamps read back at their fields, every
    other record untouched."""
    records = run_of(items, 7, 4096)
    starts, sizes, positions, at = [], [], [], 0
    for magic, body in items:
        starts.append(at)
        sizes.append(48 + len(body))
        positions.append(4096 + at)
        at += 48 + len(body)
    outs = []
    for stamp in (compiled.stamp_messages, append_stamps.python_stamp_messages):
        buf, table, stamped = bytearray(records), dict(known), {}
        count = stamp(buf, starts, sizes, positions, table, stamped, now)
        outs.append((bytes(buf), table, stamped, count))
    assert outs[0] == outs[1]
    buf, table, stamped, count = outs[0]
    assert count == len(stamped)
    for start, size, position in zip(starts, sizes, positions):
        if position in stamped:
            body = start + 48
            sys_flag = struct.unpack_from(">i", buf, body + SYS_FLAG_POSITION)[0]
            queue_offset, physical_offset = struct.unpack_from(">qq", buf, body + QUEUE_OFFSET_POSITION)
            store_timestamp = struct.unpack_from(">q", buf, body + store_timestamp_position(sys_flag))[0]
            assert (queue_offset, store_timestamp, physical_offset) == (*stamped[position], position + 48)
        else:
            assert buf[start:start + size] == records[start:start + size]


def test_the_compiled_stamps_refuse_a_record_outside_the_buffer_and_odd_arguments():
    records = bytearray(run_of([(MAGIC_NORMAL, encode_message(topic="T", body=b"x"))]))
    with pytest.raises(ValueError, match="record 0"):
        compiled.stamp_messages(records, [0], [len(records) + 1], [0], {}, {}, 1)
    with pytest.raises(ValueError, match="differ in length"):
        compiled.stamp_messages(records, [0], [len(records)], [], {}, {}, 1)
    with pytest.raises(TypeError):
        compiled.stamp_messages(bytes(records), [0], [len(records)], [0], {}, {}, 1)      # not writable


def zero_length_topic() -> bytes:
    """A message whose v1 topic length is 0 (no topic bytes), every other length consistent."""
    raw = encode_message(topic="T", body=b"b")
    assert raw.endswith(b"\x01T\x00\x00")
    raw = raw[:-4] + b"\x00\x00\x00"
    return struct.pack(">i", len(raw)) + raw[4:]


def no_room_for_properties_length() -> bytes:
    """A message with one byte after its topic: no room for the 2-byte properties length."""
    raw = encode_message(topic="T", body=b"b")
    raw = raw[:-1]
    return struct.pack(">i", len(raw)) + raw[4:]


def negative_body_length() -> bytes:
    raw = bytearray(encode_message(topic="T", body=b"b"))
    at = raw.index(b"\x00\x00\x00\x01b\x01T")             # bodyLength 1, then the body and the topic
    raw[at:at + 4] = struct.pack(">i", -1)
    return bytes(raw)


def test_the_scans_agree_where_the_rules_are_fine():
    """The cases random texts rarely draw: a property named twice (the last wins), keys with
    empty pieces (dropped), an item with two separators (not a property), a message in a NOOP
    or membership entry (not dispatched), a topic length of 0 or no room for the properties'
    length after the topic (not a message)."""
    props = ["TAGS\x01a\x02TAGS\x01b\x02", "KEYS\x01 k1  k2 \x02KEYS\x01k3\x02", "UNIQ_KEY\x01u1\x02UNIQ_KEY\x01u2",
             "KEYS\x01a\x01b\x02TAGS\x01t\x01\x02", "KEYS\x01\x02UNIQ_KEY\x01\x02TAGS\x01\x02", "\x02\x02KEYS\x01x\x02\x02"]
    raws = [with_properties(encode_message(topic="T", body=b"b"), p.encode()) for p in props]
    zero_topic = zero_length_topic()
    # the last record ends the run: reading a properties length past it would read past the buffer
    items = [(MAGIC_NORMAL, raw) for raw in raws] + [(MAGIC_NOOP, raws[0]), (MAGIC_CONFIG_CHANGE, raws[1]),
                                                     (MAGIC_NORMAL, bytes(zero_topic)),
                                                     (MAGIC_NORMAL, no_room_for_properties_length())]
    records = run_of(items)
    want = reference(records)
    assert compiled.scan_messages(records, 7) == want
    assert [w[7] for w in want[:1]] == [tags_hash_code("b")]
    assert want[1][8] == tuple(key_hash(f"T#{k}") for k in ("k3",))
    assert want[2][8] == (key_hash("T#u2"),)
    assert want[3][7] == 0 and want[3][8] == ()
    assert [w[3] for w in want[len(raws):]] == [None, None, None, None]
