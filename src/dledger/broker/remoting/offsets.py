"""Consumer offsets and queue offsets: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31).

A group's committed offsets live in the commit log's ``consumer_state``: an update goes through
the Raft log (only the master takes it; elsewhere it answers SERVICE_NOT_AVAILABLE, 14), and
every replica applies it, so after a failover the new master answers every offset that was
committed with SUCCESS. A group with no stored offset on a queue gets offset 0 (Java's
``ConsumerManageProcessor`` answers so for a queue that starts at 0 and whose first message is
not on disk; here every queue starts at 0): a new group reads a queue from its start.
"""

from __future__ import annotations

from dledger.broker.remoting import codes, queues
from dledger.broker.remoting.fields import BadField, integer, text
from dledger.broker.remoting.send import refusal

_QUEUE = {"lo": 0, "hi": (1 << 31) - 1}


def _queue(ext) -> tuple[str, int]:
    return text(ext, "topic"), integer(ext, "queueId", **_QUEUE)


async def handle_offsets(ctx, cmd):
    ext, log = cmd.ext, ctx.log
    if cmd.code == codes.GET_MAX_OFFSET:
        topic, queue_id = _queue(ext)
        return cmd.reply(codes.SUCCESS, None, {"offset": await ctx.blocking(queues.max_offset, log, topic, queue_id)})
    if cmd.code == codes.GET_MIN_OFFSET:
        topic, queue_id = _queue(ext)
        return cmd.reply(codes.SUCCESS, None, {"offset": await ctx.blocking(queues.min_offset, log, topic, queue_id)})
    if cmd.code == codes.SEARCH_OFFSET_BY_TIMESTAMP:
        topic, queue_id = _queue(ext)
        ts = integer(ext, "timestamp")
        return cmd.reply(codes.SUCCESS, None,
                         {"offset": await ctx.blocking(queues.search_offset, log, topic, queue_id, ts)})
    group = text(ext, "consumerGroup")
    topic, queue_id = _queue(ext)
    state = log.consumer_state
    if cmd.code == codes.QUERY_CONSUMER_OFFSET:
        offset = await ctx.blocking(state.offset, group, topic, queue_id)
        return cmd.reply(codes.SUCCESS, None, {"offset": 0 if offset is None else offset})
    offset = integer(ext, "commitOffset", lo=0)
    if not group:
        raise BadField("consumerGroup: is empty")
    r = await ctx.put(state.commit_offset_async(group, topic, queue_id, offset))
    if r is None:
        return cmd.reply(codes.SYSTEM_ERROR, f"[PC_SYNCHRONIZED] no quorum answer within {ctx.put_timeout} s")
    if not r.ok:
        return refusal(cmd, r)
    return cmd.reply(codes.SUCCESS)


__all__ = ["handle_offsets"]
