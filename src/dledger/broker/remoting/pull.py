"""PULL_MESSAGE (11): a queue's stored messages, byte for byte, with long polling and tag filtering.

The request header is ``PullMessageRequestHeader`` (``consumerGroup, topic, queueId,
queueOffset, maxMsgNums, sysFlag, commitOffset, suspendTimeoutMillis, subscription``). The
answer's body is the messages exactly as the commit log stores them, concatenated (the client
decodes RocketMQ's message layout itself); its header is ``nextBeginOffset, minOffset,
maxOffset, suggestWhichBrokerId`` (always 0: read from the master). As
``DefaultMessageStore.getMessage`` and ``PullMessageProcessor``:

- messages found → SUCCESS;
- the offset is the queue's end → PULL_NOT_FOUND (19); with the suspend flag (sysFlag bit 1)
  the pull is first **held** until a message reaches the queue or ``suspendTimeoutMillis``
  (at most ``MAX_HOLD_MS``) runs out: a push consumer that got an immediate answer would spin;
- an empty queue and offset 0 → PULL_NOT_FOUND; an offset past the end → PULL_OFFSET_MOVED
  (21) with ``nextBeginOffset`` the end;
- units scanned but none matching the tags → PULL_RETRY_IMMEDIATELY (20), ``nextBeginOffset``
  past them.

Tags are filtered by hash code as the broker does (``subscription`` ``"TagA || TagB"``, or
the group's heartbeat subscription, ``*`` or none for all); the client checks the tag text.
Held pulls cost no thread: each is a coroutine waiting on a future, and one checker task reads
the held queues' ends every ``CHECK_INTERVAL_S``. The ``commitOffset`` a pull carries is not
used: offsets are committed by UPDATE_CONSUMER_OFFSET (``offsets``).
"""

from __future__ import annotations

import asyncio

from dledger.broker.message_codec import java_string_hash
from dledger.broker.remoting import codes, queues
from dledger.broker.remoting.fields import integer, text

FLAG_SUSPEND = 1 << 1
MAX_PULL = 1024
#: units scanned at most per pull when tags filter (RocketMQ's 16000-byte / 20 = 800 units)
MAX_SCAN = 800
MAX_HOLD_MS = 60_000
CHECK_INTERVAL_S = 0.02


def tag_codes(expression: str | None) -> set[int] | None:
    """The hash codes an expression accepts, or None for every message (``*``, empty, none)."""
    if expression is None:
        return None
    tags = [t.strip() for t in expression.split("||")]
    if not expression.strip() or "*" in tags:
        return None
    return {java_string_hash(t) for t in tags if t}


class PullHolds:
    """Pulls parked until their queue grows past their offset (asyncio, the server's loop)."""

    def __init__(self, log, blocking) -> None:
        self.log = log
        self.blocking = blocking
        self.waiting: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = {}
        self._task: asyncio.Task | None = None

    def __len__(self) -> int:
        return sum(len(v) for v in self.waiting.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Until the queue's end passes ``offset`` (True) or the time runs out (False)."""
        fut = asyncio.get_running_loop().create_future()
        key = (topic, queue_id)
        self.waiting.setdefault(key, []).append((offset, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._check())
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(fut)
        except asyncio.TimeoutError:
            return False
        finally:
            items = self.waiting.get(key, [])
            if (offset, fut) in items:
                items.remove((offset, fut))
            if not items:
                self.waiting.pop(key, None)

    async def _check(self) -> None:
        while self.waiting:
            await asyncio.sleep(CHECK_INTERVAL_S)
            keys = list(self.waiting)
            try:
                ends = await self.blocking(queues.queue_ends, self.log, keys)
            except Exception:          # the store is closing: the holds time out on their own
                continue
            for key, end in ends.items():
                for offset, fut in self.waiting.get(key, []):
                    if end > offset and not fut.done():
                        fut.set_result(True)


def _read(log, topic, queue_id, offset, max_nums, codes_ok):
    """``(min offset, max offset, raw messages, next offset, units scanned)`` from ``offset`` on."""
    scan = max_nums if codes_ok is None else max(max_nums, MAX_SCAN)
    lo, end, found = queues.units(log, topic, queue_id, offset, scan)
    out, nxt = [], offset
    for phys, size, tags_code in found:
        if codes_ok is None or tags_code in codes_ok:
            raw = log.get_message(phys, size)
            if raw is None:
                break
            out.append(raw)
        nxt += 1
        if len(out) >= max_nums:
            break
    return lo, end, out, nxt, nxt - offset


async def handle_pull(ctx, cmd):
    ext = cmd.ext
    group = text(ext, "consumerGroup")
    topic = text(ext, "topic")
    queue_id = integer(ext, "queueId", lo=0, hi=(1 << 31) - 1)
    offset = integer(ext, "queueOffset", lo=0)
    max_nums = min(integer(ext, "maxMsgNums", default=32, lo=1), MAX_PULL)
    sys_flag = integer(ext, "sysFlag", default=0, lo=-(1 << 31), hi=(1 << 31) - 1)
    hold_ms = min(integer(ext, "suspendTimeoutMillis", default=0, lo=0), MAX_HOLD_MS)
    expression = ext.get("subscription")
    if expression is None:
        expression = ctx.groups.subscription(group, topic)
    accepted = tag_codes(expression)
    held = False
    while True:
        lo, end, raws, nxt, scanned = await ctx.blocking(_read, ctx.log, topic, queue_id, offset, max_nums,
                                                         accepted)
        if raws:
            code, body = codes.SUCCESS, b"".join(raws)
        elif scanned:
            code, body = codes.PULL_RETRY_IMMEDIATELY, b""
        elif offset > end:
            code, body, nxt = codes.PULL_OFFSET_MOVED, b"", end
        elif offset < lo:
            # its messages are gone from this replica (retention, or a log that began later):
            # RocketMQ's OFFSET_TOO_SMALL, the consumer moves to the min offset
            code, body, nxt = codes.PULL_OFFSET_MOVED, b"", lo
        else:
            code, body = codes.PULL_NOT_FOUND, b""
            if sys_flag & FLAG_SUSPEND and hold_ms > 0 and not held:
                held = True
                if await ctx.holds.wait(topic, queue_id, offset, hold_ms / 1000):
                    continue
        return cmd.reply(code, None, {"nextBeginOffset": nxt, "minOffset": lo, "maxOffset": end,
                                      "suggestWhichBrokerId": 0}, body)


__all__ = ["FLAG_SUSPEND", "MAX_HOLD_MS", "MAX_PULL", "PullHolds", "handle_pull", "tag_codes"]
