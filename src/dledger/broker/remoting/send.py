"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): a producer's message into
the ``DLedgerCommitLog``.

The request header is ``SendMessageRequestHeader`` (V2 carries the same fields under the short
names ``a``..``m``); the body is the message body, or for a batch the messages in
``MessageDecoder.encodeMessages``' layout: per message ``totalSize:i32 magic:i32 bodyCRC:i32
flag:i32 bodyLength:i32 body propertiesLength:i16 properties``. The properties string
(``KEY\\x01value\\x02...``, the client's ``UNIQ_KEY`` among them) is stored as the client sent
it, re-encoded from its pairs as Java's broker does. A body the client compressed (sysFlag bit
0) is inflated first and stored plain. The store host is this node's; the born host is the
client's address.

The answer is ``SendMessageResponseHeader``: ``msgId`` (the offset message id; a batch joins
its ids with commas), ``queueId``, ``queueOffset``. Statuses map as RocketMQ's
``SendMessageProcessor`` does: MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED → MESSAGE_ILLEGAL
(13); a node that is not the master → SERVICE_NOT_AVAILABLE (14); no quorum within the put
timeout, the term moved on while the message waited for one, or a full pending window → SYSTEM_ERROR (1) with ``[PC_SYNCHRONIZED]`` in the remark (as
Java's DLedgerCommitLog, which turns WAIT_QUORUM_ACK_TIMEOUT into OS_PAGECACHE_BUSY because
clients ignore FLUSH_SLAVE_TIMEOUT): the clients send again, to another queue or broker, so a
message answered so may be stored twice; a queue id outside the topic's queues → SYSTEM_ERROR (1); a system topic
(``RMQ_SYS_...``, the replicated consumer state's) → NO_PERMISSION (16).
"""

from __future__ import annotations

import struct
import zlib

from dledger.broker.message_codec import COMPRESSED_FLAG, parse_properties
from dledger.broker.put_checks import topic_problem
from dledger.broker.put_result import PutMessageStatus
from dledger.broker.remoting import codes
from dledger.broker.remoting.fields import BadField, integer, text
from dledger.broker.topics import is_system_topic, queue_count

#: SEND_MESSAGE_V2's short names
V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
            "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
            "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch"}
#: MessageSysFlag's transaction type bits (PREPARED 0x4, COMMIT 0x8, ROLLBACK 0xC)
TRANSACTION_TYPE_MASK = 0xC
MAX_BATCH = 1024
_BATCH_HEAD = struct.Struct(">iiiii")      # totalSize, magicCode, bodyCRC, flag, bodyLength
_I16 = struct.Struct(">h")

CODE_FOR_STATUS = {
    PutMessageStatus.MESSAGE_ILLEGAL: codes.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: codes.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: codes.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: codes.SYSTEM_ERROR,
    PutMessageStatus.OS_PAGECACHE_BUSY: codes.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: codes.SYSTEM_ERROR,
}


def long_fields(cmd) -> dict[str, str]:
    """The request's ext fields under their long names (V2's short names translated)."""
    if cmd.code == codes.SEND_MESSAGE_V2 or (cmd.code == codes.SEND_BATCH_MESSAGE and "b" in cmd.ext):
        return {V2_NAMES.get(k, k): v for k, v in cmd.ext.items()}
    return cmd.ext


def inflate(body: bytes, limit: int) -> bytes:
    """A compressed body, inflated (at most ``limit`` bytes, else ``BadField``)."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadField(f"body: sysFlag says compressed but it is not zlib data ({exc})", codes.MESSAGE_ILLEGAL) from None
    if len(out) > limit or d.unconsumed_tail:
        raise BadField(f"body: inflates to over {limit} bytes", codes.MESSAGE_ILLEGAL)
    return out


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """``(flag, body, properties)`` of each message of a batch body; ``BadField`` naming the
    message and field that does not decode."""
    out, off, n = [], 0, len(body)
    while off < n:
        i = len(out)
        if len(out) >= MAX_BATCH:
            raise BadField(f"batch: more than {MAX_BATCH} messages", codes.MESSAGE_ILLEGAL)
        if off + _BATCH_HEAD.size > n:
            raise BadField(f"batch: message {i}: {n - off} bytes left, shorter than its 20-byte head",
                           codes.MESSAGE_ILLEGAL)
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, off)
        end = off + total
        if total < _BATCH_HEAD.size + 2 or end > n:
            raise BadField(f"batch: message {i}: totalSize {total} does not fit the {n - off} bytes left",
                           codes.MESSAGE_ILLEGAL)
        pos = off + _BATCH_HEAD.size
        if body_len < 0 or pos + body_len + 2 > end:
            raise BadField(f"batch: message {i}: bodyLength {body_len} runs past the message", codes.MESSAGE_ILLEGAL)
        payload = bytes(body[pos:pos + body_len])
        pos += body_len
        props_len = _I16.unpack_from(body, pos)[0]
        pos += 2
        if props_len < 0 or pos + props_len != end:
            raise BadField(f"batch: message {i}: propertiesLength {props_len} does not end at totalSize",
                           codes.MESSAGE_ILLEGAL)
        try:
            props = parse_properties(bytes(body[pos:end]).decode("utf-8"))
        except UnicodeDecodeError:
            raise BadField(f"batch: message {i}: properties are not UTF-8", codes.MESSAGE_ILLEGAL) from None
        out.append((flag, payload, props))
        off = end
    if not out:
        raise BadField("batch: the body holds no message", codes.MESSAGE_ILLEGAL)
    return out


def start_send(ctx, cmd, peer: str):
    """Check a send request and hand its put to the commit log: ``(future, finish)``, where
    ``finish(value)`` is the answer for the future's value (None: no answer within the put
    timeout). A bad field raises ``BadField``; nothing here waits."""
    ext = long_fields(cmd)
    topic = text(ext, "topic")
    why = topic_problem(topic)
    if why:
        raise BadField(why, codes.MESSAGE_ILLEGAL)
    if is_system_topic(topic):
        raise BadField(f"topic: {topic} is a system topic; clients may not send to it", codes.NO_PERMISSION)
    queue_id = integer(ext, "queueId", lo=-(1 << 31), hi=(1 << 31) - 1)
    sys_flag = integer(ext, "sysFlag", default=0, lo=-(1 << 31), hi=(1 << 31) - 1)
    flag = integer(ext, "flag", default=0, lo=-(1 << 31), hi=(1 << 31) - 1)
    if sys_flag & TRANSACTION_TYPE_MASK:
        raise BadField("sysFlag: transactional messages are not served", codes.NO_PERMISSION)
    queues = queue_count(ctx.log, topic, ctx.default_queues)       # a dict read: no hop to a thread
    if queue_id < 0:
        queue_id = ctx.next_queue(topic, queues)
    if queue_id >= queues:
        raise BadField(f"queueId: {queue_id} is not a queue of {topic} (0..{queues - 1})", codes.SYSTEM_ERROR)
    limit = ctx.log.max_message_size
    if cmd.code == codes.SEND_BATCH_MESSAGE:
        batch = [{"topic": topic, "queue_id": queue_id, "flag": f, "properties": p, "born_host": peer,
                  "body": inflate(b, limit) if sys_flag & COMPRESSED_FLAG else b}
                 for f, b, p in decode_batch(cmd.body)]

        def finish_batch(results):
            if results is None:
                return _timeout(ctx, cmd)
            bad = next((r for r in results if not r.ok), None)
            if bad is not None:
                return refusal(cmd, bad)
            _announce(ctx, topic)
            return cmd.reply(codes.SUCCESS, None, {"msgId": ",".join(r.msg_id for r in results),
                                                   "queueId": queue_id, "queueOffset": results[0].queue_offset})

        return ctx.log.put_messages_async(batch), finish_batch
    body = inflate(cmd.body, limit) if sys_flag & COMPRESSED_FLAG else cmd.body
    props = parse_properties(text(ext, "properties", default=""))

    def finish(r):
        if r is None:
            return _timeout(ctx, cmd)
        if not r.ok:
            return refusal(cmd, r)
        _announce(ctx, topic)
        return cmd.reply(codes.SUCCESS, None, {"msgId": r.msg_id, "queueId": queue_id, "queueOffset": r.queue_offset})

    return ctx.log.put_message_async(topic, queue_id, body, properties=props, born_host=peer, flag=flag), finish


async def handle_send(ctx, cmd, peer: str):
    """One send request's answer (``ctx``: the server's ``RemotingContext``), awaited."""
    future, finish = start_send(ctx, cmd, peer)
    return finish(await ctx.put(future))


def _announce(ctx, topic: str) -> None:
    """A message of ``topic`` was stored: tell the name servers of a topic new to them."""
    if ctx.registrar is not None:
        ctx.registrar.new_topic(topic)


def refusal(cmd, r):
    """The answer to a put the commit log did not take (``r``: its ``PutMessageResult``)."""
    busy = "[PC_SYNCHRONIZED] " if r.status in (PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                                                PutMessageStatus.OS_PAGECACHE_BUSY) else ""
    return cmd.reply(CODE_FOR_STATUS.get(r.status, codes.SYSTEM_ERROR), f"{busy}{r.status.name}: {r.detail}")


def _timeout(ctx, cmd):
    return cmd.reply(codes.SYSTEM_ERROR, f"[PC_SYNCHRONIZED] no quorum answer within {ctx.put_timeout} s; "
                                         "the message may still commit")


__all__ = ["CODE_FOR_STATUS", "MAX_BATCH", "V2_NAMES", "decode_batch", "handle_send", "inflate", "long_fields",
           "refusal", "start_send"]
