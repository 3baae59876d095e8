"""The sans-IO frame codec: length-prefixed envelopes on a byte stream, decoded incrementally,
bounded before allocation, and refusing anything else with ``FrameError`` only."""

import pytest
from hypothesis import given, settings, strategies as st

from dledger.protocol import (MAX_FRAME_BYTES, Envelope, FrameError, HeartBeatRequest, PushEntryRequest,
                              VoteRequest, encode_envelope)
from dledger.transport.frames import (KEEPALIVE, PREFIX_BYTES, FrameDecoder, decode_frame, encode_frame,
                                      frame_payload)

names = st.text(max_size=6)
terms = st.integers(min_value=-1, max_value=(1 << 63) - 1)
messages = st.one_of(
    st.builds(VoteRequest, group=names, local_id=names, term=terms, ledger_end_index=terms),
    st.builds(HeartBeatRequest, group=names, leader_id=st.none() | names, term=terms, commit_index=terms),
    st.builds(PushEntryRequest, group=names, term=terms, entries=st.binary(max_size=300), count=st.integers(0, 9)))
envelopes = st.builds(Envelope, names, names, st.integers(0, 1 << 40), st.booleans(), messages)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


@given(envs=st.lists(envelopes, max_size=6), cuts=st.lists(st.integers(0, 10_000), max_size=12),
       keepalives=st.integers(0, 3))
def test_any_chunking_of_a_stream_yields_the_same_envelopes_in_order(envs, cuts, keepalives):
    stream = KEEPALIVE * keepalives + b"".join(encode_frame(e) for e in envs)
    dec = FrameDecoder()
    got = []
    for piece in chunked(stream, cuts):
        got.extend(dec.feed(piece))
    assert got == envs
    assert dec.buffered == 0 and dec.keepalives == keepalives and dec.frames == len(envs)


@given(env=envelopes)
def test_one_frame_round_trips_and_its_prefix_is_the_payload_length(env):
    data = encode_frame(env)
    assert int.from_bytes(data[:PREFIX_BYTES], "big") == len(data) - PREFIX_BYTES
    assert data[PREFIX_BYTES:] == encode_envelope(env)
    assert decode_frame(data) == env


@given(env=envelopes, cut=st.integers(0, 10_000))
def test_a_truncated_frame_is_held_never_delivered_and_refused_whole(env, cut):
    data = encode_frame(env)
    part = data[:cut % len(data)]
    dec = FrameDecoder()
    assert dec.feed(part) == []
    assert dec.buffered == len(part)
    with pytest.raises(FrameError):
        decode_frame(part)
    assert dec.feed(data[len(part):]) == [env]


def test_a_prefix_of_0xffffffff_is_refused_before_any_allocation():
    dec = FrameDecoder()
    with pytest.raises(FrameError, match="4294967295 exceeds the limit"):
        dec.feed(b"\xff\xff\xff\xff")
    assert dec.buffered == 0
    with pytest.raises(FrameError, match="earlier error"):
        dec.feed(KEEPALIVE)          # the stream lost its framing: the decoder stays refused


@given(limit=st.integers(16, 4096), excess=st.integers(1, 1000))
def test_a_declared_length_beyond_the_configured_limit_is_refused_at_the_prefix(limit, excess):
    dec = FrameDecoder(max_frame_bytes=limit)
    with pytest.raises(FrameError, match="exceeds the limit"):
        dec.feed((limit + excess).to_bytes(4, "big") + b"x")
    with pytest.raises(FrameError):
        decode_frame((limit + excess).to_bytes(4, "big"), max_frame_bytes=limit)
    with pytest.raises(FrameError):
        frame_payload(bytes(limit + excess), max_frame_bytes=limit)


def test_the_decoder_never_holds_more_than_one_frame_at_the_limit():
    limit = 1024
    dec = FrameDecoder(max_frame_bytes=limit)
    payload = frame_payload(bytes(limit), limit)       # an all-zero payload: not an envelope
    for i in range(0, len(payload) - 1, 100):
        dec.feed_payloads(payload[i:min(i + 100, len(payload) - 1)])
        assert dec.buffered <= PREFIX_BYTES + limit
    assert dec.feed_payloads(payload[-1:]) == [bytes(limit)] and dec.buffered == 0


def test_the_default_limit_is_the_protocols_and_a_bad_limit_is_refused():
    assert FrameDecoder().max_frame_bytes == MAX_FRAME_BYTES
    for bad in (0, -1, MAX_FRAME_BYTES + 1):
        with pytest.raises(ValueError):
            FrameDecoder(max_frame_bytes=bad)


def test_a_keepalive_is_not_an_envelope_frame():
    with pytest.raises(FrameError, match="keepalive"):
        decode_frame(KEEPALIVE)
    with pytest.raises(FrameError, match="follow"):
        decode_frame(KEEPALIVE + b"x")


@settings(max_examples=300)
@given(garbage=st.binary(max_size=400), cuts=st.lists(st.integers(0, 1000), max_size=5))
def test_random_garbage_yields_envelopes_or_frame_error_and_nothing_else(garbage, cuts):
    dec = FrameDecoder(max_frame_bytes=1 << 16)
    try:
        for piece in chunked(garbage, cuts):
            for env in dec.feed(piece):
                assert isinstance(env, Envelope)
    except FrameError:
        pass
    try:
        decode_frame(garbage)
    except FrameError:
        pass


@given(env=envelopes, position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_a_flipped_bit_anywhere_in_a_frame_is_refused_or_held(env, position, bit):
    """A bit flipped in the payload fails its CRC; one flipped in the prefix makes the declared
    length disagree with the bytes (refused at once as a single frame; held or refused on a
    stream). Never a different envelope."""
    data = bytearray(encode_frame(env))
    data[position % len(data)] ^= 1 << bit
    with pytest.raises(FrameError):
        decode_frame(bytes(data))
    dec = FrameDecoder()
    try:
        assert dec.feed(bytes(data)) == []
    except FrameError:
        pass


@given(envs=st.lists(envelopes, min_size=1, max_size=4))
def test_a_limited_read_leaves_later_frames_buffered_for_the_next_call(envs):
    """The handshake takes one payload; envelopes that came in the same read stay buffered."""
    dec = FrameDecoder()
    stream = frame_payload(b"handshake") + b"".join(encode_frame(e) for e in envs)
    assert dec.feed_payloads(stream, limit=1) == [b"handshake"]
    assert dec.buffered == len(stream) - len(frame_payload(b"handshake"))
    assert dec.feed() == envs


def _as_wire_version(frame: bytes, version: int) -> bytes:
    import zlib

    import msgpack

    from dledger.protocol import CRC_BYTES
    fields = msgpack.unpackb(frame[PREFIX_BYTES:-CRC_BYTES], raw=False)
    fields[0] = version
    body = msgpack.packb(fields, use_bin_type=True)
    payload = body + zlib.crc32(body).to_bytes(CRC_BYTES, "big")
    return len(payload).to_bytes(PREFIX_BYTES, "big") + payload


@pytest.mark.parametrize("arrival", ["with the handshake", "split across reads", "alone"])
@pytest.mark.parametrize("damage", ["another wire version", "a bad CRC"])
def test_a_bad_frame_held_in_the_buffer_is_refused_with_frame_error_only(arrival, damage):
    """Regression (seen against a node process under load): a request of another wire version
    that arrived in the same read as the handshake's proof sat in the decoder's buffer; refusing
    it resized that buffer while the error still held a view of the frame, so a BufferError
    escaped, the connection died of an 'internal error' and the client never got its
    UNSUPPORTED answer. Wherever the bad frame sits, the decoder raises FrameError (with the
    answer for another version) and is then unusable."""
    from dledger.protocol import UnsupportedVersion
    frame = encode_frame(Envelope("app-1", "n0", 77, False, VoteRequest(group="g", local_id="app-1", term=1, ledger_end_index=0)))
    if damage == "another wire version":
        bad = _as_wire_version(frame, 3)
    else:
        bad = frame[:-1] + bytes([frame[-1] ^ 0xFF])
    dec = FrameDecoder()
    with pytest.raises(FrameError) as raised:
        if arrival == "with the handshake":
            assert dec.feed_payloads(frame_payload(b"proof") + bad, limit=1) == [b"proof"]
            dec.feed()
        elif arrival == "split across reads":
            assert dec.feed(bad[:7]) == []
            dec.feed(bad[7:])
        else:
            dec.feed(bad)
    if damage == "another wire version":
        assert isinstance(raised.value, UnsupportedVersion) and raised.value.answer.request_id == 77
    with pytest.raises(FrameError, match="unusable"):
        dec.feed(frame)
