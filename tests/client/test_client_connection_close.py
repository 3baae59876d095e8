"""A task that opens or closes a ``NodeConnection`` and is cancelled meanwhile ends cancelled:
a Ctrl-C that came while the demo polled its nodes through short-lived connections was lost and
the demo ran on (the CLI's Ctrl-C test caught it about once in seventy runs on a loaded machine),
once in ``close`` (which caught CancelledError around its own tasks' ends) and once in the
opening (Python 3.11's ``asyncio.wait_for`` drops a cancellation that comes in the turn the
connection is made). ``close`` still stops the connection's tasks and takes their errors. Every
wait is on an event or a future."""

import asyncio
import gc

import pytest

from dledger.client.connection import NodeConnection


class Writer:
    closed = False

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def connection() -> NodeConnection:
    return NodeConnection("g", "c", "n0", "127.0.0.1:1")


def test_a_task_cancelled_while_it_closes_a_connection_ends_cancelled():
    async def main():
        conn = connection()
        conn._writer = writer = Writer()
        stopping, release = asyncio.Event(), asyncio.Event()

        async def slow_to_stop():          # a reading loop that takes a few turns to end
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                stopping.set()
                await release.wait()
                raise

        conn._tasks = [asyncio.get_running_loop().create_task(slow_to_stop())]
        await asyncio.sleep(0)             # the loop task starts and waits
        closer = asyncio.get_running_loop().create_task(conn.close())
        await stopping.wait()              # close() cancelled the loop and waits for its end
        closer.cancel()                    # Ctrl-C comes now
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await closer
        assert closer.cancelled()
        assert writer.closed and not conn.is_open      # closed all the same

    asyncio.run(main())


def test_close_ends_the_connections_tasks_and_takes_their_errors():
    async def main():
        conn = connection()
        unretrieved = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx))

        async def fails_as_it_stops():     # its end on the way out is an error of its own
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise OSError("the node went away") from None

        async def waits():
            await asyncio.Event().wait()

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(fails_as_it_stops()), loop.create_task(waits())]
        await asyncio.sleep(0)             # both start and wait
        conn._tasks = list(tasks)
        await conn.close()                 # returns: the tasks' own ends are not the caller's
        assert tasks[0].done() and not tasks[0].cancelled()
        assert tasks[1].cancelled() and conn._tasks == []
        await conn.close()                 # a second close has nothing to do
        del tasks                          # an error nobody took is reported when its task goes
        gc.collect()
        return unretrieved

    unretrieved = asyncio.run(main())
    assert unretrieved == []


def test_a_task_cancelled_as_its_connection_opens_ends_cancelled():
    """The cancellation comes in the turn the connection is made: Python 3.11's
    ``asyncio.wait_for`` returned the connection and dropped the cancellation (the demo's
    Ctrl-C was lost so once in about seventy runs on a loaded machine)."""
    async def main():
        conn = connection()
        made = asyncio.get_running_loop().create_future()

        async def connect():
            await made

        conn._connect = connect
        opener = asyncio.get_running_loop().create_task(conn._open(5.0))
        for _ in range(3):                 # the opener waits for the connection
            await asyncio.sleep(0)
        made.set_result(None)              # the connection is made ...
        opener.cancel()                    # ... and Ctrl-C comes in the same turn
        with pytest.raises(asyncio.CancelledError):
            await opener

    asyncio.run(main())
