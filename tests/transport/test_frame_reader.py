"""``FrameReader``: frames read into the reader's own buffer (``recv_into``) come out as the
same envelopes, in order, however the stream is cut into reads; the declared length is checked
before room is made; a frame larger than the buffer gets room of its own size."""

import asyncio

from hypothesis import given, settings, strategies as st

from dledger.protocol import Envelope, FrameError, PushEntryRequest, decode_envelope
from dledger.transport import frame_reader
from dledger.transport.frame_reader import FrameReader
from dledger.transport.frames import KEEPALIVE, encode_frame


class FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def feed(reader: FrameReader, data: bytes, read_sizes) -> None:
    """Hand ``data`` to ``reader`` as a transport does: ``recv_into`` the buffer it offers."""
    pos, sizes = 0, iter(read_sizes)
    while pos < len(data) and not reader.done.done():
        room = reader.get_buffer(-1)
        assert len(room) > 0
        n = min(len(room), len(data) - pos, next(sizes, len(data)))
        room[:n] = data[pos:pos + n]
        del room
        pos += n
        reader.buffer_updated(n)


def run_reader(stream: bytes, read_sizes, initial: bytes = b"", max_frame_bytes: int = 1 << 26):
    async def go():
        got, errors = [], []
        reader = FrameReader(max_frame_bytes, lambda view: got.append(decode_envelope(view)), errors.append,
                             lambda: None, None, initial)
        reader.connection_made(FakeTransport())
        reader.parse()
        feed(reader, stream, read_sizes)
        return reader, got, errors
    return asyncio.run(go())


def push(k: int, size: int) -> Envelope:
    return Envelope("a", "b", k, False, PushEntryRequest(group="g", entries=bytes([k % 251]) * size, count=1))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=8),
       reads=st.lists(st.integers(1, 400_000), max_size=20), keepalives=st.integers(0, 3),
       with_handshake_tail=st.integers(0, 50))
def test_any_cutting_into_reads_yields_the_same_envelopes_in_order(sizes, reads, keepalives, with_handshake_tail):
    envs = [push(k, n) for k, n in enumerate(sizes)]
    stream = KEEPALIVE * keepalives + b"".join(encode_frame(e) for e in envs)
    initial, rest = stream[:with_handshake_tail], stream[with_handshake_tail:]
    reader, got, errors = run_reader(rest, reads, initial)
    assert errors == [] and got == envs
    assert reader.keepalives == keepalives and reader.frames == len(envs)


def test_a_frame_larger_than_the_buffer_arrives_whole():
    big = push(1, 3 * frame_reader.BUFFER_BYTES)
    reader, got, errors = run_reader(encode_frame(big) + encode_frame(push(2, 10)), [65_536] * 200)
    assert errors == [] and got == [big, push(2, 10)]


def test_a_declared_length_over_the_limit_fails_before_any_room_is_made():
    reader, got, errors = run_reader((1 << 30).to_bytes(4, "big") + b"x" * 10, [14], max_frame_bytes=1 << 20)
    assert got == [] and len(errors) == 1 and isinstance(errors[0], FrameError)
    assert reader.transport.closed and len(reader._buf) == frame_reader.INITIAL_BYTES


def test_a_payload_the_callee_refuses_ends_reading_after_the_frames_before_it():
    stream = encode_frame(push(1, 5)) + (5).to_bytes(4, "big") + b"junk!" + encode_frame(push(3, 5))
    reader, got, errors = run_reader(stream, [len(stream)])
    assert got == [push(1, 5)] and len(errors) == 1 and isinstance(errors[0], FrameError)


def test_a_partial_frame_is_moved_to_the_start_when_the_free_end_runs_short():
    envs = [push(k, 200_000) for k in range(12)]                 # 2.4 MB through a 1 MiB buffer
    reader, got, errors = run_reader(b"".join(encode_frame(e) for e in envs), [150_001] * 40)
    assert errors == [] and got == envs
    assert 4 * 200_000 <= len(reader._buf) <= frame_reader.BUFFER_BYTES      # grown from 64 KiB


def test_small_frames_keep_the_buffer_small():
    envs = [push(k, 100) for k in range(2_000)]
    reader, got, errors = run_reader(b"".join(encode_frame(e) for e in envs), [1_000] * 400)
    assert errors == [] and got == envs and len(reader._buf) == frame_reader.INITIAL_BYTES
