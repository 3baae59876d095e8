"""Appends that wait for a send slot travel together: group commit on the client side.

``AppendCoalescer(send, max_in_flight)`` keeps at most ``max_in_flight`` requests to the leader
in flight for single appends. An append made while all slots are busy waits; when a slot frees
up, everything that waited (up to ``max_bodies`` bodies and ``max_bytes`` bytes) is sent as one
batch append, and each caller gets its own entry's answer. With the cluster keeping up, every
append goes alone, sent by its caller's own task; under load, one request (one leader batch, one push, one sync in
``fsync`` mode) carries many appends instead of each paying for its own.

What a caller sees does not change: a batch is all or none at the leader, so the rule of
``client.aio`` holds for each append of it (a batch answered NOT_LEADER was taken for none and
is sent again; a batch whose answer is lost is unknown for every append in it, and is never
sent again). Bodies larger than ``max_body`` are never grouped, so one large body that the
leader refuses cannot take small ones down with it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable

#: ``send(bodies, deadline)``: one request for ``bodies``; one answer per body, or raises
Send = Callable[[list, float], Awaitable[list]]


class AppendCoalescer:
    def __init__(self, send: Send, *, max_in_flight: int = 4, max_bodies: int = 1024,
                 max_bytes: int = 1024 * 1024, max_body: int = 64 * 1024) -> None:
        if max_in_flight < 1 or max_bodies < 1:
            raise ValueError("max_in_flight and max_bodies must be positive")
        self._send = send
        self.max_in_flight, self.max_bodies, self.max_bytes, self.max_body = (
            max_in_flight, max_bodies, max_bytes, max_body)
        self._waiting: deque[tuple[bytes, asyncio.Future, float]] = deque()
        self._senders = 0
        #: requests sent and bodies they carried (a ratio above 1 means appends were grouped)
        self.requests = self.bodies = 0

    def groupable(self, body: bytes) -> bool:
        return len(body) <= self.max_body

    async def append(self, body: bytes, deadline: float):
        """``body``'s answer (or the exception of the request that carried it)."""
        if self._senders < self.max_in_flight and not self._waiting:
            return await self._alone(body, deadline)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((body, fut, deadline))
        if self._senders < self.max_in_flight:
            self._senders += 1
            loop.create_task(self._sender())
        return await fut

    async def _alone(self, body: bytes, deadline: float):
        """A free slot and nobody waiting: the caller sends its append itself, in its own
        task (no hand-over to a sender task and back: two turns of the loop fewer each way).
        Appends made meanwhile wait as usual; a sender takes them when this slot frees up."""
        self._senders += 1
        self.requests += 1
        self.bodies += 1
        try:
            return (await self._send([body], deadline))[0]
        finally:
            self._senders -= 1
            if self._waiting and self._senders < self.max_in_flight:
                self._senders += 1
                asyncio.get_running_loop().create_task(self._sender())

    def _take(self) -> list[tuple[bytes, asyncio.Future, float]]:
        waiting, group, nbytes = self._waiting, [], 0
        while waiting and len(group) < self.max_bodies:
            body = waiting[0][0]
            if group and nbytes + len(body) > self.max_bytes:
                break
            item = waiting.popleft()
            if item[1].done():           # its caller was cancelled: do not send it
                continue
            group.append(item)
            nbytes += len(body)
        return group

    async def _sender(self) -> None:
        try:
            while True:
                group = self._take()
                if not group:
                    return
                self.requests += 1
                self.bodies += len(group)
                try:
                    answers = await self._send([b for b, _f, _d in group], min(d for _b, _f, d in group))
                except BaseException as exc:  # every append of the request shares its fate
                    for _b, fut, _d in group:
                        if not fut.done():
                            fut.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_b, fut, _d), answer in zip(group, answers):
                    if not fut.done():
                        fut.set_result(answer)
        finally:
            self._senders -= 1
            if self._waiting and self._senders == 0:    # a cancelled sender leaves no one behind
                for _b, fut, _d in self._waiting:
                    if not fut.done():
                        fut.set_exception(RuntimeError("the client stopped sending"))
                self._waiting.clear()


__all__ = ["AppendCoalescer"]
