"""A connection whose own code fails (a bug, not the peer) closes with a reason that says so
and logs the stack, instead of closing as if nothing had happened."""

import asyncio
import logging

from dledger.protocol import Envelope, VoteRequest
from dledger.transport.frames import FrameDecoder, encode_frame
from dledger.transport.tcp_connection import Connection, SendQueue, TcpOptions


def test_an_exception_inside_the_connection_closes_it_as_an_internal_error(caplog):
    async def scenario() -> str:
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        async def on_client(reader, writer):
            accepted.set_result((reader, writer))

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _r, client = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await accepted

        def on_envelope(_env) -> None:
            raise RuntimeError("a handler bug")

        conn = Connection(reader, writer, FrameDecoder(), SendQueue(8, 1 << 16), TcpOptions(), "t", on_envelope)
        client.write(encode_frame(Envelope("a", "b", 1, False, VoteRequest(group="g", local_id="a", term=1))))
        reason = await asyncio.wait_for(conn.run(), 10)
        client.close()
        server.close()
        return reason

    with caplog.at_level(logging.ERROR, logger="dledger.transport.tcp_connection"):
        reason = asyncio.run(scenario())
    assert reason.startswith("internal error") and "a handler bug" in reason
    assert any(r.exc_info and "a handler bug" in str(r.exc_info[1]) for r in caplog.records)
