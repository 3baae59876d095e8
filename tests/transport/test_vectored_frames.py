"""Frames sent as buffers (``encode_frame_parts``) and written with vectored sends: the same
bytes as ``encode_frame``, large values not copied, and a write the socket takes only in part
finished by the transport in order."""

import asyncio

import pytest

from dledger.protocol import MESSAGE_TYPES, AppendEntryRequest, BatchAppendEntryRequest, Envelope, PushEntryRequest
from dledger.transport.frames import BIG_VALUE_BYTES, encode_frame, encode_frame_parts

from transport.tcp_helpers import read_envelopes, small_buffer_connection


@pytest.mark.parametrize("size", [0, 100, BIG_VALUE_BYTES - 1, BIG_VALUE_BYTES, 70_000])
@pytest.mark.parametrize("cls", [cls for cls, _code in MESSAGE_TYPES])
def test_the_parts_of_a_frame_are_the_bytes_of_the_frame(cls, size):
    msg = cls(group="g", local_id="a", remote_id="b", term=3)
    for name, value in (("entries", bytes(range(256)) * (size // 256) + b"e" * (size % 256)),
                        ("body", b"b" * size), ("data", b"d" * size),
                        ("batch_msgs", [b"x" * size, b"y", b"z" * size])):
        if hasattr(msg, name):
            setattr(msg, name, value if cls is not type(msg) or name != "entries" or cls is PushEntryRequest
                    else [value, b"w"])
    env = Envelope("a", "b", 9, False, msg)
    parts, total = encode_frame_parts(env)
    assert b"".join(parts) == encode_frame(env) and total == len(encode_frame(env))


def test_large_values_travel_as_themselves_not_copies():
    records = b"r" * 200_000
    bodies = [b"s" * 50_000, b"t" * 10, b"u" * 60_000]
    push = Envelope("a", "b", 1, False, PushEntryRequest(group="g", entries=records, count=3))
    parts, _ = encode_frame_parts(push)
    assert any(p is records for p in parts)
    batch = Envelope("a", "b", 2, False, BatchAppendEntryRequest(group="g", batch_msgs=bodies))
    parts, _ = encode_frame_parts(batch)
    assert any(p is bodies[0] for p in parts) and any(p is bodies[2] for p in parts)
    assert not any(p is bodies[1] for p in parts)
    small = Envelope("a", "b", 3, False, AppendEntryRequest(group="g", body=b"small"))
    assert len(encode_frame_parts(small)[0]) == 2          # one packed body and its checksum


def test_a_vectored_write_the_socket_takes_in_part_is_finished_in_order():
    async def scenario():
        conn, peer_reader, peer_writer = await small_buffer_connection()
        assert conn._sock is not None                   # the plain socket: vectored sends
        envs = [Envelope("a", "b", k, False, PushEntryRequest(group="g", entries=bytes([k]) * (300_000 + k),
                                                              count=1, first_entry_index=k))
                for k in range(12)]
        for env in envs:
            parts, size = encode_frame_parts(env)
            conn.queue.put(parts, size)
        runner = asyncio.get_running_loop().create_task(conn.run())
        got = await read_envelopes(peer_reader, len(envs))
        runner.cancel()
        conn.close("done")
        peer_writer.close()
        return envs, got

    envs, got = asyncio.run(scenario())
    assert [(e.request_id, e.msg.entries) for e in got] == [(e.request_id, e.msg.entries) for e in envs]
