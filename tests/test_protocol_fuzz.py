"""Fuzzing the frame codec field by field: every truncation of a frame, a value of the wrong
type in any field of any message, integers past int64, unknown wire versions and message
tags, values nested thousands deep and huge declared lengths inside a frame. Whatever the
bytes, ``decode_envelope`` returns a valid envelope or raises ``FrameError``, nothing else
(``tests/test_protocol.py`` covers random and mutated whole frames)."""

from __future__ import annotations

import zlib
from dataclasses import fields

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from dledger.protocol import (MAX_FRAME_BYTES, MESSAGE_TYPES, WIRE_VERSION, Envelope, FrameError, decode_envelope,
                              encode_envelope)

CLASSES = [cls for cls, _ in MESSAGE_TYPES]


def _frame_of(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


def _array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items (each None packs as one byte)."""
    return msgpack.packb([None] * n)[:-n]


def _valid_values(cls) -> list:
    return [getattr(cls(), f.name) for f in fields(cls)]


def _pack(version, tag, values, header=("a", "b", 1, False)) -> bytes:
    return _frame_of(msgpack.packb([version, *header, tag, values], use_bin_type=True))


#: values of every msgpack kind, and which declared field types accept each
WRONG = {
    "int": ["1", b"1", 1.5, True, None, [1], {"a": 1}, 1 << 63, (1 << 64) - 1],
    "str": [1, b"x", None, 1.5, ["x"], {"x": "y"}, True],
    "str | None": [1, b"x", 1.5, ["x"], {"x": "y"}, True],
    "bool": [0, 1, "true", None, b"\x01", 1.0],
    "bytes": ["text", 1, None, [b"x"], {"x": b"y"}, True],
    "list": [b"x", "x", 1, None, {"x": 1}],
    "dict": [[], b"x", "x", 1, None],
}


def _wrong_cases():
    for tag, (cls, _code) in enumerate(MESSAGE_TYPES):
        for k, f in enumerate(fields(cls)):
            for value in WRONG[f.type]:
                if f.name == "entries" and f.type == "list" and value == b"x":
                    continue
                yield pytest.param(tag, k, value, id=f"{cls.__name__}.{f.name}={value!r:.12}")


@pytest.mark.parametrize("tag,k,value", list(_wrong_cases()))
def test_a_value_of_the_wrong_type_in_any_field_is_refused_naming_the_field(tag, k, value):
    cls = MESSAGE_TYPES[tag][0]
    values = _valid_values(cls)
    values[k] = value
    with pytest.raises(FrameError, match=fields(cls)[k].name):
        decode_envelope(_pack(WIRE_VERSION, tag, values))


@pytest.mark.parametrize("tag", range(len(MESSAGE_TYPES)))
def test_items_of_the_wrong_type_in_list_and_dict_fields_are_refused(tag):
    cls = MESSAGE_TYPES[tag][0]
    for k, f in enumerate(fields(cls)):
        if f.type not in ("list", "dict"):
            continue
        bad = {"list": [[1, "x"], [None], [[b"x"]], [{"a": 1}]], "dict": [{"n0": 1}, {"n0": None}, {"n0": ["x"]}]}
        if f.name == "match_index":                 # member id -> index: a number is what it holds
            bad["dict"] = [{"n0": "x"}, {"n0": None}, {"n0": ["x"]}, {1: 2}]
        for value in bad[f.type]:
            values = _valid_values(cls)
            values[k] = value
            with pytest.raises(FrameError):
                decode_envelope(_pack(WIRE_VERSION, tag, values))


messages = st.sampled_from(CLASSES).map(lambda cls: cls())
envelopes = st.builds(Envelope, st.text(max_size=4), st.text(max_size=4),
                      st.integers(-(1 << 63), (1 << 63) - 1), st.booleans(), messages)


@settings(max_examples=100)
@given(env=envelopes)
def test_every_truncation_of_a_frame_is_refused(env):
    wire = encode_envelope(env)
    body = wire[:-4]
    for cut in range(len(wire)):
        with pytest.raises(FrameError):
            decode_envelope(wire[:cut])
    for cut in range(len(body)):          # a shorter body with a checksum that matches it
        with pytest.raises(FrameError):
            decode_envelope(_frame_of(body[:cut]))


@settings(max_examples=200)
@given(version=st.integers(-(1 << 63), (1 << 64) - 1).filter(lambda v: v != WIRE_VERSION)
       | st.sampled_from([None, "2", 2.0, True, b"\x02", [2]]),
       tag=st.integers(0, len(MESSAGE_TYPES) - 1))
def test_an_unknown_wire_version_is_refused(version, tag):
    with pytest.raises(FrameError, match="version"):
        decode_envelope(_pack(version, tag, _valid_values(MESSAGE_TYPES[tag][0])))


@settings(max_examples=200)
@given(tag=st.integers(-(1 << 63), (1 << 64) - 1).filter(lambda t: not 0 <= t < len(MESSAGE_TYPES))
       | st.sampled_from([None, "0", 0.0, True, False, b"\x00", [0]]))
def test_an_unknown_message_tag_is_refused(tag):
    with pytest.raises(FrameError, match="tag"):
        decode_envelope(_pack(WIRE_VERSION, tag, []))


@pytest.mark.parametrize("header", [(1, "b", 1, False), ("a", None, 1, False), ("a", "b", "1", False),
                                    ("a", "b", True, False), ("a", "b", 1, 1), ("a", "b", 1.5, False),
                                    ("a", "b", 1 << 64 - 1, None)])
def test_a_bad_envelope_header_is_refused(header):
    with pytest.raises(FrameError):
        decode_envelope(_pack(WIRE_VERSION, 0, _valid_values(MESSAGE_TYPES[0][0]), header=header))


@pytest.mark.parametrize("depth", [10, 1_000, 100_000])
@pytest.mark.parametrize("tag", range(len(MESSAGE_TYPES)))
def test_a_value_nested_thousands_deep_in_any_field_is_refused(tag, depth):
    cls = MESSAGE_TYPES[tag][0]
    head = msgpack.packb([WIRE_VERSION, "a", "b", 1, False, tag], use_bin_type=True)[1:]
    n = len(fields(cls))
    for k in range(n):
        values = [msgpack.packb(v, use_bin_type=True) for v in _valid_values(cls)]
        values[k] = b"\x91" * depth + b"\xc0"            # [[[...[None]...]]]
        body = b"\x97" + head + _array_header(n) + b"".join(values)
        with pytest.raises(FrameError):
            decode_envelope(_frame_of(body))


@pytest.mark.parametrize("declared", [b"\xc6\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff",
                                      b"\xdf\xff\xff\xff\xff", b"\xc5\xff\xff", b"\xdc\xff\xff"])
@pytest.mark.parametrize("tag", range(len(MESSAGE_TYPES)))
def test_a_huge_declared_length_inside_a_frame_is_refused_without_allocating_it(tag, declared):
    cls = MESSAGE_TYPES[tag][0]
    head = msgpack.packb([WIRE_VERSION, "a", "b", 1, False, tag], use_bin_type=True)[1:]
    n = len(fields(cls))
    values = [msgpack.packb(v, use_bin_type=True) for v in _valid_values(cls)]
    values[-1] = declared + b"xyz"                        # claims far more bytes than follow
    body = b"\x97" + head + _array_header(n) + b"".join(values)
    with pytest.raises(FrameError):
        decode_envelope(_frame_of(body))


def test_a_frame_over_the_size_limit_is_refused_before_it_is_read():
    with pytest.raises(FrameError, match="exceeds"):
        decode_envelope(bytes(MAX_FRAME_BYTES + 1))


@settings(max_examples=300)
@given(tag=st.integers(0, len(MESSAGE_TYPES) - 1), data=st.data())
def test_any_msgpack_values_in_the_fields_decode_to_a_valid_message_or_are_refused(tag, data):
    cls = MESSAGE_TYPES[tag][0]
    leaf = st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats() \
        | st.text(max_size=5) | st.binary(max_size=5)
    anything = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)
    n = len(fields(cls))
    values = data.draw(st.lists(anything, min_size=n - 1, max_size=n + 1) | st.lists(anything, min_size=n, max_size=n))
    try:
        env = decode_envelope(_pack(WIRE_VERSION, tag, values))
    except FrameError:
        return
    assert type(env.msg) is cls and decode_envelope(encode_envelope(env)) == env


@pytest.mark.parametrize("position", range(7))
def test_a_value_nested_thousands_deep_in_the_envelope_header_is_refused(position):
    """Regression: naming a bad value in the error message took its full repr, and a value
    nested a thousand deep raised RecursionError out of the decoder."""
    items = [msgpack.packb(v, use_bin_type=True) for v in [WIRE_VERSION, "a", "b", 1, False, 0, []]]
    items[position] = b"\x91" * 1_000 + b"\xc0"
    with pytest.raises(FrameError):
        decode_envelope(_frame_of(b"\x97" + b"".join(items)))
