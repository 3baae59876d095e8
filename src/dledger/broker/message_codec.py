"""RocketMQ's CommitLog message layout: the one codec of the project (the broker writes it, the
Spark ``dledger-messages`` source reads it).

In a broker whose CommitLog runs on DLedger, each NORMAL entry's body is one message in this
layout (all integers big-endian; RocketMQ's ``CommitLog.calMsgLength`` and ``MessageDecoder``)::

    totalSize:i32  magicCode:i32  bodyCRC:i32  queueId:i32  flag:i32  queueOffset:i64
    physicalOffset:i64  sysFlag:i32  bornTimestamp:i64  bornHost  storeTimestamp:i64
    storeHost  reconsumeTimes:i32  preparedTransactionOffset:i64
    bodyLength:i32 body  topicLength(i8 for magic v1, i16 for v2) topic
    propertiesLength:i16 properties

Hosts are 4 address bytes + port:i32, or 16 + 4 when ``sysFlag`` has BORNHOST_V6 (0x10) /
STOREHOST_V6 (0x20). Properties are ``name\\x01value\\x02`` pairs (UTF-8); ``TAGS``, ``KEYS``
(several keys joined by a space) and ``UNIQ_KEY`` are three of them. ``bodyCRC`` is the CRC32
of the stored body with the sign bit cleared (``UtilAll.crc32``); a body with the COMPRESSED
flag (0x1) is zlib data and is inflated on decode. The tags hash code a consume queue keeps is
Java's ``String.hashCode`` of the tags. The offset message id is the store host's address and
port followed by the physical offset, in upper-case hex (``MessageDecoder.createMessageId``).

Rules: ``decode`` raises ``MessageFormatError`` naming the field that is wrong and never reads
past the buffer; ``decode_message`` never raises for bad bytes: it returns a ``Message`` whose
``error`` says what is wrong (the Spark source shows it in a column). ``encode_message`` raises
``MessageFormatError`` for a value the layout cannot hold (an empty topic, properties over
32767 bytes).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import struct
import zlib
from dataclasses import dataclass, field

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BLANK_MAGIC = -875286124
COMPRESSED_FLAG = 0x1
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"     # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
MAX_PROPERTIES_SIZE = 32767                           # the i16 length field (Short.MAX_VALUE)
MAX_TOPIC_SIZE_V1 = 127

#: byte positions inside a message (RocketMQ's MessageDecoder constants)
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYS_FLAG_POSITION = 36
BORN_HOST_POSITION = 48

_FIXED = struct.Struct(">iiiiiqqiq")   # totalSize .. bornTimestamp (48 bytes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
#: totalSize, magicCode, queueId and sysFlag in one read (the append hook's ``locate``)
_LOCATE = struct.Struct(">ii4xi20xi")


class MessageFormatError(ValueError):
    """A message (bytes or values) the CommitLog layout cannot hold; ``field`` names the part."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name


@dataclass(slots=True)
class Message:
    total_size: int | None = None
    magic_code: int | None = None
    body_crc: int | None = None
    queue_id: int | None = None
    flag: int | None = None
    queue_offset: int | None = None
    physical_offset: int | None = None
    sys_flag: int | None = None
    born_timestamp: int | None = None
    born_host: str | None = None
    store_timestamp: int | None = None
    store_host: str | None = None
    reconsume_times: int | None = None
    prepared_transaction_offset: int | None = None
    body: bytes | None = None
    topic: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def key_list(self) -> list[str]:
        """The KEYS property split on spaces (empty keys dropped)."""
        return [k for k in (self.keys or "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, a signed 32-bit result)."""
    h = 0
    if text.isascii():
        units = text.encode("ascii")
    else:
        data = text.encode("utf-16-be")
        units = struct.unpack(f">{len(data) // 2}H", data)
    for u in units:
        h = h * 31 + u            # reduced once at the end: the same low 32 bits
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_hash_code(tags: str | None) -> int:
    """The consume queue's tags code: ``tags.hashCode()``, 0 without tags."""
    return java_string_hash(tags) if tags else 0


def body_crc(stored_body: bytes) -> int:
    return zlib.crc32(stored_body) & 0x7FFFFFFF


def message_id(store_host: str, physical_offset: int) -> str:
    """The offset message id: store host address, port (i32) and physical offset (i64), hex."""
    addr, port = split_host(store_host)
    return (_packed_address(addr) + _I32.pack(port) + _I64.pack(physical_offset)).hex().upper()


def parse_message_id(msg_id: str) -> tuple[str, int]:
    """``(store host, physical offset)`` of an offset message id (``MessageFormatError`` if not one)."""
    try:
        raw = bytes.fromhex(msg_id)
    except (ValueError, TypeError):
        raise MessageFormatError("msg_id", f"{msg_id!r} is not hex") from None
    if len(raw) not in (16, 28):
        raise MessageFormatError("msg_id", f"{len(raw)} bytes; an offset message id has 16 (IPv4) or 28 (IPv6)")
    n = len(raw) - 12
    addr = ipaddress.ip_address(raw[:n])
    port = _I32.unpack_from(raw, n)[0]
    host = f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"
    return host, _I64.unpack_from(raw, n + 4)[0]


@functools.lru_cache(maxsize=1024)
def _packed_address(addr: str) -> bytes:
    """The 4 or 16 bytes of an IP address (parsed once per distinct text)."""
    return ipaddress.ip_address(addr).packed


def split_host(host) -> tuple[str, int]:
    """``("1.2.3.4", 80)`` from a pair, ``"1.2.3.4:80"`` or ``"[::1]:80"``."""
    if isinstance(host, tuple):
        return host[0], int(host[1])
    text = str(host)
    addr, _, port = text.rpartition(":")
    return addr.strip("[]"), int(port)


def _host(buf, off: int, v6: bool, name: str) -> tuple[str, int]:
    n = 16 if v6 else 4
    if off + n + 4 > len(buf):
        raise MessageFormatError(name, f"runs past the message end ({len(buf)} bytes)")
    addr = ipaddress.ip_address(bytes(buf[off:off + n]))
    port = _I32.unpack_from(buf, off + n)[0]
    text = f"[{addr}]:{port}" if v6 else f"{addr}:{port}"
    return text, off + n + 4


def _need(buf, off: int, size: int, name: str) -> None:
    if off + size > len(buf):
        raise MessageFormatError(name, f"runs past the message end ({len(buf)} bytes)")


def parse_properties(text: str) -> dict[str, str]:
    props = {}
    for item in text.split(PROPERTY_SEPARATOR):
        nv = item.split(NAME_VALUE_SEPARATOR)
        if len(nv) == 2:
            props[nv[0]] = nv[1]
    return props


#: properties as this broker writes them (``put_message``: UNIQ_KEY among the caller's
#: properties, then TAGS, then KEYS), each item closed by its separator and every name one of
#: these: one match reads them, where ``parse_properties`` builds a dict of every item
_USUAL_PROPERTIES = re.compile("(?:UNIQ_KEY\x01([^\x01\x02]*)\x02)?(?:TAGS\x01([^\x01\x02]*)\x02)?"
                               "(?:KEYS\x01([^\x01\x02]*)\x02)?(?:UNIQ_KEY\x01([^\x01\x02]*)\x02)?")


def dispatch_properties(text: str) -> tuple[str | None, str | None, str | None]:
    """``(TAGS, KEYS, UNIQ_KEY)`` of properties text, each None when absent: the values
    ``parse_properties`` gives, found by one match when the text holds these properties only,
    in the order this broker writes them (else from ``parse_properties``)."""
    m = _USUAL_PROPERTIES.fullmatch(text)
    if m is None:
        props = parse_properties(text)
        return props.get(PROPERTY_TAGS), props.get(PROPERTY_KEYS), props.get(PROPERTY_UNIQ_KEY)
    uniq_first, tags, keys, uniq = m.groups()
    return tags, keys, uniq_first if uniq is None else uniq


def properties_bytes(properties: dict[str, str] | None) -> bytes:
    if not properties:
        return b""
    # each (name, value) joined by \x01 (a TypeError for a name or value not a str), the
    # pairs by \x02; a separator inside a name or value shows in the counts
    text = PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, properties.items())) + PROPERTY_SEPARATOR
    if text.count(NAME_VALUE_SEPARATOR) != len(properties) or text.count(PROPERTY_SEPARATOR) != len(properties):
        for k, v in properties.items():           # which one holds a separator
            for name, value in (("property name", k), ("property value", v)):
                if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
                    raise MessageFormatError(name, f"{value!r} holds a separator character (\\x01 or \\x02)")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        for k, v in properties.items():           # which one UTF-8 cannot hold (a lone surrogate)
            for name, value in (("property name", k), ("property value", v)):
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise MessageFormatError(name, f"{value[:40]!r} is not encodable as UTF-8 ({exc.reason})") from None
        raise


def decode(buf, *, inflate: bool = True) -> Message:
    """Decode one message; ``MessageFormatError`` names the first field that is wrong."""
    m = Message()
    n = len(buf)
    if n < _FIXED.size:
        raise MessageFormatError("totalSize", f"message of {n} bytes is shorter than its {_FIXED.size}-byte head")
    (m.total_size, m.magic_code, m.body_crc, m.queue_id, m.flag, m.queue_offset,
     m.physical_offset, m.sys_flag, m.born_timestamp) = _FIXED.unpack_from(buf, 0)
    if m.magic_code not in (MAGIC_V1, MAGIC_V2):
        raise MessageFormatError("magicCode", f"not a message: magic code {m.magic_code:#x} is neither v1 nor v2")
    if m.total_size != n:
        raise MessageFormatError("totalSize", f"{m.total_size} differs from the {n} bytes given")
    off = _FIXED.size
    m.born_host, off = _host(buf, off, bool(m.sys_flag & BORNHOST_V6_FLAG), "bornHost")
    _need(buf, off, 8, "storeTimestamp")
    m.store_timestamp = _I64.unpack_from(buf, off)[0]
    m.store_host, off = _host(buf, off + 8, bool(m.sys_flag & STOREHOST_V6_FLAG), "storeHost")
    _need(buf, off, 16, "reconsumeTimes")
    m.reconsume_times = _I32.unpack_from(buf, off)[0]
    m.prepared_transaction_offset = _I64.unpack_from(buf, off + 4)[0]
    body_len = _I32.unpack_from(buf, off + 12)[0]
    off += 16
    if body_len < 0 or off + body_len > n:
        raise MessageFormatError("bodyLength", f"{body_len} runs past the message end")
    body = bytes(buf[off:off + body_len])
    off += body_len
    if m.magic_code == MAGIC_V2:
        _need(buf, off, 2, "topicLength")
        topic_len = _I16.unpack_from(buf, off)[0]
        off += 2
    else:
        _need(buf, off, 1, "topicLength")
        topic_len = buf[off]
        off += 1
    if topic_len < 0 or off + topic_len > n:
        raise MessageFormatError("topicLength", f"{topic_len} runs past the message end")
    try:
        m.topic = bytes(buf[off:off + topic_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise MessageFormatError("topic", "is not UTF-8") from None
    off += topic_len
    _need(buf, off, 2, "propertiesLength")
    props_len = _I16.unpack_from(buf, off)[0]
    off += 2
    if props_len < 0 or off + props_len != n:
        raise MessageFormatError("propertiesLength", f"{props_len} does not end at the message end")
    try:
        m.properties = parse_properties(bytes(buf[off:off + props_len]).decode("utf-8"))
    except UnicodeDecodeError:
        raise MessageFormatError("properties", "are not UTF-8") from None
    if inflate and m.sys_flag & COMPRESSED_FLAG:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise MessageFormatError("body", f"COMPRESSED flag set but not zlib data ({exc})") from None
    m.body = body
    return m


def decode_message(buf) -> Message:
    """Decode one message, never raising for bad bytes: damage goes to ``Message.error``."""
    try:
        return decode(buf)
    except MessageFormatError as exc:
        return Message(error=str(exc))


def encode_message(*, topic: str, body: bytes, queue_id: int = 0, flag: int = 0,
                   queue_offset: int = 0, physical_offset: int = 0, sys_flag: int = 0,
                   born_timestamp: int = 0, born_host=("127.0.0.1", 0),
                   store_timestamp: int = 0, store_host=("127.0.0.1", 0),
                   reconsume_times: int = 0, prepared_transaction_offset: int = 0,
                   properties: dict[str, str] | None = None) -> bytes:
    """A message in the CommitLog layout (v1, or v2 when the topic is over 127 bytes)."""
    if not topic:
        raise MessageFormatError("topic", "is empty")
    v2, topic_field = _topic_field(topic)
    props = properties_bytes(properties)
    if len(props) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError("properties", f"{len(props)} bytes; at most {MAX_PROPERTIES_SIZE}")
    stored_body = zlib.compress(body) if sys_flag & COMPRESSED_FLAG else bytes(body)
    born, born_port = host_field(born_host, "bornHost")
    store, store_port = host_field(store_host, "storeHost")
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    if len(born) == 16:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store) == 16:
        sys_flag |= STOREHOST_V6_FLAG
    total = _FIXED_SIZE + len(born) + len(store) + len(stored_body) + len(topic_field) + 2 + len(props)
    try:
        fixed = _fixed_part(len(born), len(store)).pack(
            total, MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(stored_body) & 0x7FFFFFFF, queue_id, flag,
            queue_offset, physical_offset, sys_flag, born_timestamp, born, born_port, store_timestamp, store,
            store_port, reconsume_times, prepared_transaction_offset, len(stored_body))
        props_len = _I16.pack(len(props))
    except struct.error as exc:
        raise MessageFormatError("integer field", f"out of range ({exc})") from None
    return b"".join((fixed, stored_body, topic_field, props_len, props))


@functools.lru_cache(maxsize=1024)
def _topic_field(topic: str) -> tuple[bool, bytes]:
    """``(v2, the topic's length and bytes)``: magic v2 (a 2-byte length) over 127 bytes."""
    topic_b = topic.encode("utf-8")
    if len(topic_b) > 32767:
        raise MessageFormatError("topic", f"{len(topic_b)} bytes; at most 32767")
    v2 = len(topic_b) > MAX_TOPIC_SIZE_V1
    return v2, (_I16.pack(len(topic_b)) if v2 else bytes([len(topic_b)])) + topic_b


def host_field(host, name: str) -> tuple[bytes, int]:
    """``(4 or 16 address bytes, port)`` of a host; ``MessageFormatError`` naming ``name``."""
    try:
        try:
            return _packed_host(host)
        except TypeError:                 # not hashable (a list): not kept
            return _packed_host.__wrapped__(host)
    except ValueError as exc:
        raise MessageFormatError(name, str(exc)) from None


@functools.lru_cache(maxsize=1024)
def _packed_host(host) -> tuple[bytes, int]:
    addr, port = split_host(host)
    return _packed_address(addr), port


#: the fixed-size fields, totalSize .. bodyLength, without the two host addresses
_FIXED_SIZE = 4 * 5 + 8 * 2 + 4 + 8 + 4 + 8 + 4 + 4 + 8 + 4


@functools.lru_cache(maxsize=4)
def _fixed_part(born_len: int, store_len: int) -> struct.Struct:
    """totalSize .. bodyLength in one struct, for 4- or 16-byte host addresses."""
    return struct.Struct(f">iiiiiqqiq{born_len}siq{store_len}siiqi")


def store_timestamp_position(sys_flag: int) -> int:
    """Where ``storeTimestamp`` lies: after the born host (8 or 20 bytes)."""
    return BORN_HOST_POSITION + (20 if sys_flag & BORNHOST_V6_FLAG else 8)


def locate(buf, base: int = 0) -> tuple[str, int, int] | None:
    """``(topic, queue id, storeTimestamp position)`` of the message at ``buf[base:]``, read
    from the fewest bytes (the append hook's fast path), or None when those bytes are not a
    message of the length they claim."""
    n = len(buf) - base
    if n < 92:
        return None
    total, magic, queue_id, sys_flag = _LOCATE.unpack_from(buf, base)
    if total != n or magic not in (MAGIC_V1, MAGIC_V2):
        return None
    ts_pos = BORN_HOST_POSITION + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    off = ts_pos + 8 + (20 if sys_flag & STOREHOST_V6_FLAG else 8) + 12
    if off + 4 > n:
        return None
    body_len = _I32.unpack_from(buf, base + off)[0]
    off += 4 + body_len
    if body_len < 0 or off + 3 > n:
        return None
    if magic == MAGIC_V2:
        topic_len = _I16.unpack_from(buf, base + off)[0]
        off += 2
    else:
        topic_len = buf[base + off]
        off += 1
    if topic_len <= 0 or off + topic_len > n:
        return None
    try:
        topic = bytes(buf[base + off:base + off + topic_len]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return topic, queue_id, ts_pos


#: totalSize, magicCode, queueId, queueOffset, sysFlag (bodyCRC, flag, physicalOffset skipped),
#: then storeTimestamp and bodyLength where they lie with two IPv4 hosts
_DISPATCH_HEAD = struct.Struct(">ii4xi4xq8xi16xq20xi")
#: from the born host on, by ``(sysFlag >> 4) & 3`` (the hosts' kinds): storeTimestamp, bodyLength
_DISPATCH_TAIL = tuple(struct.Struct(f">{born}xq{store}x12xi") for born, store in
                       ((8, 8), (20, 8), (8, 20), (20, 20)))
_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
_MIN_MESSAGE = 92                      # what ``locate`` asks for: the shortest v1 message with IPv4 hosts


def dispatch_fields(buf, start: int = 0, end: int | None = None):
    """What the reput service needs of the message at ``buf[start:end]``, read from its bytes
    at their fixed places, without copying the body nor the hosts' text: ``(topic, queue id,
    queue offset, store timestamp, TAGS, KEYS, UNIQ_KEY, body at, body length)`` (an absent
    property is None; the stored body is ``buf[start + at:start + at + length]``, so that a
    reader of bodies needs no second parse); None when the bytes are not one whole message of
    the length they claim. Everything is read inside ``[start, end)``; ``buf`` may hold other
    bytes around it (a run of log records).

    Accepted exactly when ``decode(..., inflate=False)`` accepts the bytes and the topic is not
    empty (``locate``'s rule, which the append hook follows); the three properties are the
    values ``parse_properties`` gives."""
    if end is None:
        end = len(buf)
    if not isinstance(buf, bytes):
        buf, start, end = bytes(buf[start:end]), 0, end - start
    n = end - start
    if n < _MIN_MESSAGE:
        return None
    total, magic, queue_id, queue_offset, sys_flag, store_timestamp, body_len = _DISPATCH_HEAD.unpack_from(buf, start)
    if total != n or (magic != MAGIC_V1 and magic != MAGIC_V2):
        return None
    if sys_flag & _V6_FLAGS:
        tail = _DISPATCH_TAIL[(sys_flag >> 4) & 3]
        off = 48 + tail.size
        if off > n:
            return None
        store_timestamp, body_len = tail.unpack_from(buf, start + 48)
    else:
        off = _DISPATCH_HEAD.size
    body_at = off
    off += body_len
    if body_len < 0 or off + 3 > n:
        return None
    if magic == MAGIC_V1:
        topic_len = buf[start + off]
        off += 1
    else:
        topic_len = _I16.unpack_from(buf, start + off)[0]
        off += 2
    if topic_len <= 0 or off + topic_len + 2 > n:
        return None
    try:
        topic = buf[start + off:start + off + topic_len].decode("utf-8")
    except UnicodeDecodeError:
        return None
    off += topic_len
    props_len = _I16.unpack_from(buf, start + off)[0]
    if props_len < 0 or off + 2 + props_len != n:
        return None
    if not props_len:
        return topic, queue_id, queue_offset, store_timestamp, None, None, None, body_at, body_len
    try:
        tags, keys, uniq = dispatch_properties(buf[start + off + 2:end].decode("utf-8"))
    except UnicodeDecodeError:
        return None
    return topic, queue_id, queue_offset, store_timestamp, tags, keys, uniq, body_at, body_len
