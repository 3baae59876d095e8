"""``frame_views``: a push's records decoded as a view of the frame's bytes. Any bytes decode to
what ``protocol.decode_envelope`` makes of them (the same envelope, or a ``FrameError``), and
the bytes under a view that outlives its call to ``FrameReader.on_payload`` never change."""

import asyncio
from dataclasses import fields

import msgpack
from hypothesis import given, settings, strategies as st

from dledger.protocol import (CRC_BYTES, MESSAGE_TYPES, Envelope, FrameError, PushEntryRequest, crc32, decode_envelope,
                              encode_envelope)
from dledger.transport.frame_reader import FrameReader
from dledger.transport.frame_views import VIEW_MIN_BYTES, decode_envelope_view, records_span
from dledger.transport.frames import decode_frame, encode_envelope_parts, encode_frame

from .test_frame_reader import FakeTransport, feed

texts = st.text(max_size=8)
ints = st.integers(-(1 << 63), (1 << 63) - 1)
blobs = st.one_of(st.binary(max_size=64), st.integers(0, 3 * VIEW_MIN_BYTES).map(lambda n: bytes([n % 251]) * n))
#: every field of every message, by its type (list and dict fields by their items)
BY_NAME = {"batch_msgs": st.lists(blobs, max_size=3), "positions": st.lists(ints, max_size=4),
           "index_list": st.lists(ints, max_size=4), "match_index": st.dictionaries(texts, ints, max_size=3)}
BY_TYPE = {"str": texts, "str | None": st.none() | texts, "int": ints, "bool": st.booleans(), "bytes": blobs,
           "list": st.lists(blobs, max_size=3), "dict": st.dictionaries(texts, texts, max_size=3)}


def message(cls):
    return st.builds(cls, **{f.name: BY_NAME.get(f.name, BY_TYPE[f.type]) for f in fields(cls)})


messages = st.sampled_from([cls for cls, _ in MESSAGE_TYPES]).flatmap(message)
envelopes = st.builds(Envelope, texts, texts, st.integers(0, 1 << 62), st.booleans(), messages)


def decoded(data):
    """What a decoder makes of ``data``: the envelope, or FrameError."""
    try:
        return decode_envelope(data)
    except FrameError:
        return FrameError


@settings(max_examples=300, deadline=None)
@given(env=envelopes)
def test_every_frame_kind_decodes_to_the_plain_decode(env):
    frame = encode_envelope(env)
    got = decode_envelope_view(frame)
    assert got == decode_envelope(frame) == env
    parts, size = encode_envelope_parts(env)
    assert b"".join(parts) == frame and size == len(frame)
    if type(env.msg) is PushEntryRequest and len(frame) >= VIEW_MIN_BYTES:
        assert type(got.msg.entries) is memoryview and got.msg.entries.readonly
        assert got.msg.entries.obj is frame                          # not a copy
    else:
        assert type(getattr(got.msg, "entries", b"")) is not memoryview


def view_decoded(frame: bytes):
    """What the in-place decode makes of ``frame``: the envelope, or ``FrameError``."""
    try:
        return decode_envelope_view(frame)
    except FrameError:
        return FrameError


def refreshed(body: bytes) -> bytes:
    return body + crc32(body).to_bytes(CRC_BYTES, "big")


@settings(max_examples=300, deadline=None)
@given(env=envelopes, at=st.integers(0, 1 << 20), byte=st.integers(0, 255), cut=st.integers(0, 1 << 20))
def test_damaged_frames_with_a_sound_checksum_decode_as_the_plain_decode_does(env, at, byte, cut):
    body = encode_envelope(env)[:-CRC_BYTES]
    changed = bytearray(body)
    changed[at % len(body)] = byte
    for frame in (refreshed(bytes(changed)), refreshed(body[:cut % len(body)]), refreshed(body + b"\x00"),
                  encode_envelope(env)[:-1] + b"\x00"):
        assert view_decoded(frame) == decoded(frame)


@settings(max_examples=100, deadline=None)
@given(n_fields=st.integers(0, 16), size=st.integers(VIEW_MIN_BYTES, 3 * VIEW_MIN_BYTES))
def test_a_push_of_fewer_or_more_fields_decodes_as_the_plain_decode(n_fields, size):
    """An older peer's push ends before the fields added later; a push of more fields than
    this version knows is refused; both as ``decode_envelope`` does."""
    values = ["g", "", "", 200, None, 1, 0, 1, 0, 0, b"r" * size, 1, 1, 1, 0, 7][:n_fields]
    frame = refreshed(msgpack.packb([2, "a", "b", 1, False, 4, values], use_bin_type=True))
    assert view_decoded(frame) == decoded(frame)
    assert (records_span(memoryview(frame)[:-CRC_BYTES]) is not None) == (10 < n_fields < 16)   # a fixarray


def test_records_are_found_behind_long_strings_and_every_int_width():
    env = Envelope("s" * 300, "d" * 70_000, (1 << 62), True,
                   PushEntryRequest(group="g" * 40, remote_id="", leader_id=None, term=(1 << 40), pre_log_index=-1,
                                    pre_log_term=-(1 << 40), commit_index=70_000, type=200, entries=b"x" * 70_000,
                                    first_entry_index=5, count=1, last_entry_term=3))
    frame = encode_envelope(env)
    got = decode_envelope_view(frame)
    assert got == env and type(got.msg.entries) is memoryview
    assert decode_frame(encode_frame(env)) == env


def run_reader(stream: bytes, reads, keep: bool):
    async def go():
        kept = []

        def on_payload(view):
            env = decode_envelope_view(view)
            kept.append((env, bytes(env.msg.entries)) if keep else None)

        reader = FrameReader(1 << 26, on_payload, lambda exc: kept.append(exc), lambda: None, None)
        reader.connection_made(FakeTransport())
        feed(reader, stream, reads)
        return reader, kept
    return asyncio.run(go())


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(VIEW_MIN_BYTES, 200_000), min_size=2, max_size=10),
       reads=st.lists(st.integers(1, 300_000), max_size=30))
def test_a_view_that_outlives_its_call_never_sees_its_bytes_change(sizes, reads):
    envs = [Envelope("a", "b", k, False, PushEntryRequest(group="g", entries=bytes([k % 251]) * n, count=1))
            for k, n in enumerate(sizes)]
    reader, kept = run_reader(b"".join(encode_frame(e) for e in envs), reads, keep=True)
    assert [env for env, _ in kept] == envs
    for env, copy in kept:
        assert type(env.msg.entries) is memoryview and env.msg.entries == copy
    reader.get_buffer(-1)                   # the next read goes elsewhere: views are alive
    assert reader.lent >= 1 and all(env.msg.entries == copy for env, copy in kept)


def test_views_dropped_at_once_leave_the_buffer_to_be_reused():
    envs = [Envelope("a", "b", k, False, PushEntryRequest(group="g", entries=bytes([k]) * 50_000, count=1))
            for k in range(40)]
    reader, kept = run_reader(b"".join(encode_frame(e) for e in envs), [70_001] * 100, keep=False)
    assert kept == [None] * 40 and reader.lent == 0
