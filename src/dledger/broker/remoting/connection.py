"""One remoting connection, served: frames in, each request a task of its own, answers out.

Shared by the broker's server and the name server. A request runs as its own task (a held pull
does not stop the requests behind it: clients match answers by ``opaque``), or, when the
server's ``start`` takes it (sends), as a callback when its put is answered; at most
``max_in_flight`` at once per connection, then reading waits, and so it does while the peer
does not read its answers. A header that does not decode
is answered with one SYSTEM_ERROR line (opaque 0) and the connection goes on (its frame's
length was sound); a declared length out of range is answered so and the connection is
closed; so is a connection that sends nothing for ``idle_s``. A oneway request is served and not answered; a response (nobody here awaits one) is
dropped. When the connection ends, its requests still running are cancelled.
"""

from __future__ import annotations

import asyncio

from dledger.broker.remoting import codes
from dledger.broker.remoting.command import CommandDecoder, CommandError, RemotingCommand, decode_frame, encode

MAX_IN_FLIGHT = 256
#: a connection that sends nothing for this long is closed (RocketMQ's serverChannelMaxIdleTimeSeconds)
IDLE_S = 120.0


def error_answer(remark: str) -> RemotingCommand:
    return RemotingCommand(codes.SYSTEM_ERROR, 0, codes.FLAG_RESPONSE, remark)


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dispatch, *,
                           max_frame_bytes: int, max_in_flight: int = MAX_IN_FLIGHT, idle_s: float = IDLE_S,
                           start=None) -> None:
    """Serve until the peer closes or breaks the framing; ``await dispatch(cmd)`` answers a request.

    ``start(cmd, respond)``, when given, is offered each request first: it returns True when it
    took the request and will call ``respond(answer)`` once, on this loop (no task: the sends'
    path), False to leave it to ``dispatch``."""
    decoder = CommandDecoder(max_frame_bytes)
    slots = asyncio.Semaphore(max_in_flight)
    tasks: set[asyncio.Task] = set()

    def write(answer: RemotingCommand) -> None:
        if writer.is_closing():
            return
        try:
            writer.write(encode(answer))
        except (ConnectionError, OSError):
            pass

    def responder(cmd: RemotingCommand):
        answered = False

        def respond(answer: RemotingCommand) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            slots.release()
            if not cmd.oneway:
                write(answer)
        return respond

    async def one(cmd: RemotingCommand) -> None:
        answer = await dispatch(cmd)
        if cmd.oneway:
            return
        try:
            writer.write(encode(answer))
            await writer.drain()
        except (ConnectionError, OSError):
            pass

    def done(task: asyncio.Task) -> None:
        tasks.discard(task)
        slots.release()

    try:
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    data = await reader.read(65536)
            except asyncio.TimeoutError:
                break
            if not data:
                break
            try:
                frames = decoder.feed(data)
            except CommandError as exc:
                writer.write(encode(error_answer(str(exc))))
                await writer.drain()
                break
            for frame in frames:
                try:
                    cmd = decode_frame(frame)
                except CommandError as exc:
                    write(error_answer(str(exc)))
                    continue
                if cmd.is_response:
                    continue
                await slots.acquire()
                if start is not None and start(cmd, responder(cmd)):
                    continue
                task = asyncio.ensure_future(one(cmd))
                tasks.add(task)
                task.add_done_callback(done)
            await writer.drain()            # answers written without a task: wait if the peer lags
    except (ConnectionError, OSError):
        pass
    finally:
        for t in list(tasks):
            t.cancel()
        writer.close()


__all__ = ["IDLE_S", "MAX_IN_FLIGHT", "error_answer", "serve_connection"]
