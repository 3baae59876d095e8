"""``WriteBatch``: frames queued while one input is handled leave when it is through, straight to
the socket (no turn of the event loop), answers to clients first; a connection whose writer
task is at work keeps the frames for it, in order."""

import asyncio
import select
import socket

from dledger.protocol import AppendEntryResponse, Envelope, PushEntryRequest
from dledger.transport.frames import FrameDecoder, encode_frame, encode_frame_parts
from dledger.transport.tcp_connection import Connection, SendQueue, TcpOptions, WriteBatch

from transport.tcp_helpers import read_envelopes, small_buffer_connection


class Recorder:
    """A stand-in connection that notes when it was written."""

    def __init__(self, name: str, log: list, answers_client: bool = False) -> None:
        self.name, self.log, self.answers_client = name, log, answers_client

    def write_now(self) -> None:
        self.log.append(self.name)


def test_held_writes_leave_on_release_clients_first_each_once():
    async def scenario():
        log: list = []
        batch = WriteBatch(asyncio.get_running_loop())
        peer_a, client, peer_b = Recorder("a", log), Recorder("client", log, True), Recorder("b", log)
        batch.hold()
        for conn in (peer_a, client, peer_b, peer_a):
            batch.mark(conn)
        assert log == []                                   # held: the input is still being handled
        batch.release()
        assert log == ["client", "a", "b"]                 # at once, the client's answer first, each once
        await asyncio.sleep(0)                             # the loop's next turn writes nothing more
        assert log == ["client", "a", "b"]
    asyncio.run(scenario())


def test_marks_outside_a_held_input_leave_on_flush_or_on_the_next_turn():
    async def scenario():
        log: list = []
        batch = WriteBatch(asyncio.get_running_loop())
        batch.mark(Recorder("a", log))
        batch.flush()                                      # the driver's flush after a turn
        assert log == ["a"]
        batch.mark(Recorder("b", log))                     # nobody flushes: the loop's next turn does
        assert log == ["a"]
        await asyncio.sleep(0)
        assert log == ["a", "b"]
    asyncio.run(scenario())


def _push(k: int, size: int) -> Envelope:
    return Envelope("a", "b", k, False, PushEntryRequest(group="g", entries=bytes([k]) * size, count=1,
                                                          first_entry_index=k))


def test_a_flushed_frame_is_in_the_socket_before_the_loop_turns():
    async def scenario():
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=a)
        batch = WriteBatch(asyncio.get_running_loop())
        conn = Connection(reader, writer, FrameDecoder(), SendQueue(64, 1 << 26), TcpOptions(), "t", lambda e: None,
                          batch=batch, answers_client=True)
        env = Envelope("a", "b", 1, True, AppendEntryResponse(group="g", code=200, index=7))
        frame = encode_frame(env)
        conn.queue.put(frame, len(frame), wake=False)
        batch.mark(conn)
        batch.flush()
        # no await since: the bytes were written by the flush itself
        assert select.select([b], [], [], 0)[0] == [b]
        assert b.recv(1 << 16) == frame
        assert not conn.queue.frames and not conn.queue.ready.is_set()   # the writer task was not woken
        writer.close()
        b.close()
    asyncio.run(scenario())


def test_frames_the_socket_cannot_take_now_are_finished_by_the_writer_task_in_order():
    async def scenario():
        batch = WriteBatch(asyncio.get_running_loop())
        conn, peer_reader, peer_writer = await small_buffer_connection(batch=batch)
        runner = asyncio.get_running_loop().create_task(conn.run())
        await asyncio.sleep(0)
        envs = [_push(k, 300_000 + k) for k in range(8)]
        for k, env in enumerate(envs):                     # direct writes, then a full socket: the writer task
            parts, size = encode_frame_parts(env)
            conn.queue.put(parts, size, wake=False)
            batch.mark(conn)
            if k % 3 == 2:
                batch.flush()
        batch.flush()
        got = await read_envelopes(peer_reader, len(envs))
        assert [(e.request_id, e.msg.entries) for e in got] == [(e.request_id, e.msg.entries) for e in envs]
        runner.cancel()
        conn.close("done")
        peer_writer.close()
    asyncio.run(scenario())
