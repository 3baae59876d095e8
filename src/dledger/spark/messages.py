"""RocketMQ broker messages inside DLedger entries: decoding (and encoding, for tests and tools).

In a broker whose CommitLog runs on DLedger, each NORMAL entry's body is one message in the
CommitLog layout (all integers big-endian)::

    totalSize:i32  magicCode:i32  bodyCRC:i32  queueId:i32  flag:i32  queueOffset:i64
    physicalOffset:i64  sysFlag:i32  bornTimestamp:i64  bornHost  storeTimestamp:i64
    storeHost  reconsumeTimes:i32  preparedTransactionOffset:i64
    bodyLength:i32 body  topicLength(i8, or i16 for magic v2) topic  propertiesLength:i16 properties

Hosts are 4 address bytes + port:i32, or 16 + 4 when ``sysFlag`` has BORNHOST_V6 (0x10) /
STOREHOST_V6 (0x20). Properties are ``name\\x01value\\x02`` pairs (UTF-8); ``TAGS`` and
``KEYS`` are two of them. A body with the COMPRESSED flag (0x1) is zlib data and is inflated.

Rules: ``decode_message`` never reads past the buffer and never raises for bad bytes: it
returns a ``Message`` whose ``error`` says what is wrong (the data source shows it in a column).
"""

from __future__ import annotations

import ipaddress
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

_FIXED = struct.Struct(">iiiiiqqiq")   # totalSize .. bornTimestamp (48 bytes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")


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
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")


def _host(buf, off: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    addr = ipaddress.ip_address(bytes(buf[off:off + n]))
    port = _I32.unpack_from(buf, off + n)[0]
    text = f"[{addr}]:{port}" if v6 else f"{addr}:{port}"
    return text, off + n + 4


def parse_properties(text: str) -> dict[str, str]:
    props = {}
    for item in text.split(PROPERTY_SEPARATOR):
        nv = item.split(NAME_VALUE_SEPARATOR)
        if len(nv) == 2:
            props[nv[0]] = nv[1]
    return props


def decode_message(buf) -> Message:
    """Decode one message (see the module docstring); damage goes to ``Message.error``."""
    m = Message()
    n = len(buf)
    try:
        if n < _FIXED.size:
            raise ValueError(f"message of {n} bytes is shorter than its {_FIXED.size}-byte head")
        (m.total_size, m.magic_code, m.body_crc, m.queue_id, m.flag, m.queue_offset,
         m.physical_offset, m.sys_flag, m.born_timestamp) = _FIXED.unpack_from(buf, 0)
        if m.magic_code not in (MAGIC_V1, MAGIC_V2):
            raise ValueError(f"not a message: magic code {m.magic_code:#x}")
        if m.total_size != n:
            raise ValueError(f"totalSize {m.total_size} differs from the entry body size {n}")
        off = _FIXED.size
        m.born_host, off = _host(buf, off, bool(m.sys_flag & BORNHOST_V6_FLAG))
        m.store_timestamp = _I64.unpack_from(buf, off)[0]
        m.store_host, off = _host(buf, off + 8, bool(m.sys_flag & STOREHOST_V6_FLAG))
        m.reconsume_times = _I32.unpack_from(buf, off)[0]
        m.prepared_transaction_offset = _I64.unpack_from(buf, off + 4)[0]
        off += 12
        body_len = _I32.unpack_from(buf, off)[0]
        off += 4
        if body_len < 0 or off + body_len > n:
            raise ValueError(f"body length {body_len} runs past the message end")
        body = bytes(buf[off:off + body_len])
        off += body_len
        if m.magic_code == MAGIC_V2:
            topic_len = _I16.unpack_from(buf, off)[0]
            off += 2
        else:
            topic_len = buf[off]
            off += 1
        if topic_len < 0 or off + topic_len > n:
            raise ValueError(f"topic length {topic_len} runs past the message end")
        m.topic = bytes(buf[off:off + topic_len]).decode("utf-8")
        off += topic_len
        props_len = _I16.unpack_from(buf, off)[0]
        off += 2
        if props_len < 0 or off + props_len > n:
            raise ValueError(f"properties length {props_len} runs past the message end")
        m.properties = parse_properties(bytes(buf[off:off + props_len]).decode("utf-8"))
        if m.sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
        m.body = body
    except (ValueError, struct.error, IndexError, zlib.error) as exc:
        m.error = str(exc)
    return m


def encode_message(*, topic: str, body: bytes, queue_id: int = 0, flag: int = 0,
                   queue_offset: int = 0, physical_offset: int = 0, sys_flag: int = 0,
                   born_timestamp: int = 0, born_host: tuple[str, int] = ("127.0.0.1", 0),
                   store_timestamp: int = 0, store_host: tuple[str, int] = ("127.0.0.1", 0),
                   reconsume_times: int = 0, prepared_transaction_offset: int = 0,
                   properties: dict[str, str] | None = None) -> bytes:
    """A message in the CommitLog layout (v1, or v2 when the topic is over 127 bytes)."""
    topic_b = topic.encode("utf-8")
    props = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}"
                    for k, v in (properties or {}).items()).encode("utf-8")
    stored_body = zlib.compress(body) if sys_flag & COMPRESSED_FLAG else body
    born = ipaddress.ip_address(born_host[0])
    store = ipaddress.ip_address(store_host[0])
    if born.version == 6:
        sys_flag |= BORNHOST_V6_FLAG
    if store.version == 6:
        sys_flag |= STOREHOST_V6_FLAG
    v2 = len(topic_b) > 127
    topic_field = (_I16.pack(len(topic_b)) if v2 else bytes([len(topic_b)])) + topic_b
    tail = (struct.pack(">q", born_timestamp) + born.packed + _I32.pack(born_host[1])
            + _I64.pack(store_timestamp) + store.packed + _I32.pack(store_host[1])
            + _I32.pack(reconsume_times) + _I64.pack(prepared_transaction_offset)
            + _I32.pack(len(stored_body)) + stored_body + topic_field
            + _I16.pack(len(props)) + props)
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + len(tail)
    head = struct.pack(">iiiiiqqi", total, MAGIC_V2 if v2 else MAGIC_V1,
                       zlib.crc32(stored_body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
                       physical_offset, sys_flag)
    return head + tail
