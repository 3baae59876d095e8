"""Message conversion between RocketMQ's v2 protobuf ``Message`` and the stored message.

- ``to_put(message, max_body_size)``: a v2 ``Message`` of a ``SendMessageRequest`` -> the
  arguments of ``DLedgerCommitLog.put_message`` (topic, queue id, body, tags, keys, properties),
  after checking it. The client's ``message_id`` (its v1 format, 34 hex characters) is stored as
  the ``UNIQ_KEY`` property, as RocketMQ does; user properties are stored as properties. The
  body digest the client sends (CRC32, MD5 or SHA1) must match the body, and a GZIP-encoded body
  is stored inflated. A message the broker cannot take raises ``Refused(code, detail)`` with the
  v2 status code to answer (``BAD_REQUEST``, ``MESSAGE_CORRUPTED``, ``MESSAGE_BODY_TOO_LARGE``,
  ``ILLEGAL_MESSAGE_PROPERTY_KEY``, ``UNSUPPORTED`` for types other than NORMAL, ...).
- ``to_v2(stored, ...)``: a decoded stored ``message_codec.Message`` -> a v2 ``Message`` with its
  system properties (tag, keys, message id = UNIQ_KEY or else the offset message id, body digest
  CRC32 as 8 upper-case hex digits, born and store time and host, queue id and offset) and the
  delivery's receipt handle, attempt and invisible duration.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib

from dledger.broker.grpc_v2.rocketmq_v2 import definition_pb2 as pb
from dledger.broker.message_codec import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, message_id

#: property names RocketMQ keeps for itself (MessageConst); a user property may not use them,
#: and they are not shown to consumers as user properties
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRANSACTION_PREPARED_QUEUE_OFFSET", "DUP_INFO",
    "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
    "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__SHARDINGKEY", "__STARTDELIVERTIME", "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "BORN_TIMESTAMP", "TRACE_CONTEXT", "INNER_NUM", "INNER_BASE",
})
MAX_MESSAGE_ID = 128


class Refused(ValueError):
    """A message the broker does not take: ``code`` is the v2 status code to answer."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code


def digest(body: bytes, kind: int = pb.CRC32) -> str:
    """The body digest as the clients write it: CRC32 as 8 upper-case hex digits, MD5 and SHA1
    as upper-case hex."""
    if kind == pb.CRC32:
        return f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"
    if kind == pb.MD5:
        return hashlib.md5(body).hexdigest().upper()
    if kind == pb.SHA1:
        return hashlib.sha1(body).hexdigest().upper()
    raise Refused(pb.BAD_REQUEST, f"body_digest.type: {kind} is not CRC32, MD5 or SHA1")


def to_put(message: pb.Message, max_body_size: int) -> dict:
    """``put_message`` keyword arguments (with ``topic``, ``queue_id``, ``body``) for a v2 message."""
    topic = message.topic.name
    if not topic:
        raise Refused(pb.ILLEGAL_TOPIC, "topic: is empty")
    sp = message.system_properties
    if sp.message_type not in (pb.NORMAL, pb.MESSAGE_TYPE_UNSPECIFIED):
        raise Refused(pb.UNSUPPORTED, f"message_type: {pb.MessageType.Name(sp.message_type)} messages are not "
                                      f"supported by this broker (NORMAL only)")
    if sp.HasField("delivery_timestamp") or sp.HasField("message_group"):
        raise Refused(pb.UNSUPPORTED, "delayed and FIFO (message_group) messages are not supported by this broker")
    mid = sp.message_id
    if not mid or len(mid) > MAX_MESSAGE_ID or not mid.isascii() or not mid.isalnum():
        raise Refused(pb.ILLEGAL_MESSAGE_ID, f"message_id: {mid[:MAX_MESSAGE_ID]!r} is not a message id")
    body = message.body
    if sp.body_encoding == pb.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise Refused(pb.MESSAGE_CORRUPTED, f"body: not gzip data ({exc})") from None
    elif sp.body_encoding not in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        raise Refused(pb.BAD_REQUEST, f"body_encoding: {sp.body_encoding} is not IDENTITY or GZIP")
    if not body:
        raise Refused(pb.MESSAGE_BODY_EMPTY, "body: is empty")
    if len(body) > max_body_size:
        raise Refused(pb.MESSAGE_BODY_TOO_LARGE, f"body: {len(body)} bytes; at most {max_body_size}")
    if sp.HasField("body_digest"):
        want = sp.body_digest.checksum.upper()
        got = digest(message.body, sp.body_digest.type)
        if want != got:
            raise Refused(pb.MESSAGE_CORRUPTED, f"body_digest: {sp.body_digest.checksum[:64]!r} does not match "
                                                f"the body ({got})")
    properties = {}
    for k, v in message.user_properties.items():
        if k in SYSTEM_PROPERTIES or not k:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user_properties: {k!r} is a reserved property name")
        properties[k] = v
    properties[PROPERTY_UNIQ_KEY] = mid
    keys = list(sp.keys)
    if any(not k or " " in k for k in keys):
        raise Refused(pb.ILLEGAL_MESSAGE_KEY, "keys: a key is empty or holds a space")
    tag = sp.tag if sp.HasField("tag") else None
    if tag is not None and (not tag or "|" in tag):
        raise Refused(pb.ILLEGAL_MESSAGE_TAG, f"tag: {tag!r} is empty or holds '|'")
    return {"topic": topic, "queue_id": sp.queue_id, "body": body, "tags": tag, "keys": keys,
            "properties": properties}


def _millis(ts, ms: int | None) -> None:
    if ms is not None:
        ts.FromMilliseconds(ms)


def to_v2(stored, *, receipt_handle: str | None = None, attempt: int | None = None,
          invisible_ms: int | None = None, namespace: str = "") -> pb.Message:
    """The v2 ``Message`` a consumer receives for a stored message."""
    out = pb.Message()
    out.topic.name = stored.topic
    out.topic.resource_namespace = namespace
    props = stored.properties
    for k, v in props.items():
        if k not in SYSTEM_PROPERTIES:
            out.user_properties[k] = v
    body = stored.body or b""
    out.body = body
    sp = out.system_properties
    if props.get(PROPERTY_TAGS):
        sp.tag = props[PROPERTY_TAGS]
    sp.keys.extend(k for k in props.get(PROPERTY_KEYS, "").split(" ") if k)
    sp.message_id = props.get(PROPERTY_UNIQ_KEY) or message_id(stored.store_host, stored.physical_offset)
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = digest(body)
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.NORMAL
    _millis(sp.born_timestamp, stored.born_timestamp)
    sp.born_host = stored.born_host or ""
    _millis(sp.store_timestamp, stored.store_timestamp)
    sp.store_host = stored.store_host or ""
    sp.queue_id = stored.queue_id
    sp.queue_offset = stored.queue_offset
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if attempt is not None:
        sp.delivery_attempt = attempt
    if invisible_ms is not None:
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    return out


__all__ = ["MAX_MESSAGE_ID", "SYSTEM_PROPERTIES", "Refused", "digest", "to_put", "to_v2"]
