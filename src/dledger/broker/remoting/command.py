"""RocketMQ's remoting command and its frame: the sans-IO codec (bytes in, commands out).

A frame is ``int32 total | int32 (serializeType << 24 | headerLength) | header | body`` with
``total = 4 + headerLength + bodyLength`` (big-endian; ``RemotingCommand.encode``). The header
holds ``code, language, version, opaque, flag, remark, extFields`` in one of two forms:

- serializeType 0, JSON: ``{"code": 10, "language": "CPP", "version": 0, "opaque": 7, "flag": 0,
  "remark": "", "extFields": {"topic": "T", "queueId": "0", ...}}``;
- serializeType 1, ROCKETMQ binary (``RocketMQSerializable``): ``code:i16 language:i8
  version:i16 opaque:i32 flag:i32 remarkLength:i32 remark extFieldsLength:i32 extFields``, the
  ext fields a run of ``keyLength:i16 key valueLength:i32 value`` (UTF-8).

A reply is written in the form of its request. Flag bit 0 marks a response, bit 1 a oneway
request. ``extFields`` values are text on the wire; a JSON header may carry numbers (the C++
client sends ``queueId: 0``): decoding turns every value into its text, so handlers read one
kind. Rules: ``decode_header`` raises ``CommandError`` naming what is wrong and never reads
past the bytes it is given; ``CommandDecoder`` checks a frame's declared length against its
limit before it keeps anything of it, and after a framing error it is spent (the connection is
closed: a stream that lost its framing cannot be resynchronised).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from dledger.broker.remoting.codes import (FLAG_ONEWAY, FLAG_RESPONSE, LANGUAGES, SERIALIZE_JSON,
                                           SERIALIZE_ROCKETMQ, VERSION)

#: RocketMQ's default frame limit (``com.rocketmq.remoting.frameMaxLength``)
MAX_FRAME_BYTES = 16 * 1024 * 1024
_I32 = struct.Struct(">i")
_BIN_HEAD = struct.Struct(">hbhii")       # code, language, version, opaque, flag
_I16 = struct.Struct(">h")


class CommandError(ValueError):
    """Bytes that are not a remoting command (the message names the part)."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    def reply(self, code: int, remark: str | None = None, ext: dict | None = None, body: bytes = b"") -> "RemotingCommand":
        """The response to this request: its opaque echoed, the response bit set, its header form."""
        fields = {k: v if type(v) is str else _text(v) for k, v in (ext or {}).items() if v is not None}
        return RemotingCommand(code, self.opaque, FLAG_RESPONSE, remark, fields, body,
                               serialize_type=self.serialize_type)


def _text(value) -> str:
    """An ext field's value as the text Java would read (numbers may arrive as JSON numbers)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


# -- headers ----------------------------------------------------------------------------------
def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        remark = (cmd.remark or "").encode("utf-8")
        ext = b"".join(_I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
                       for kb, vb in ((k.encode("utf-8"), v.encode("utf-8")) for k, v in cmd.ext.items()))
        lang = LANGUAGES.index(cmd.language) if cmd.language in LANGUAGES else 0
        return b"".join((_BIN_HEAD.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag),
                         _I32.pack(len(remark)), remark, _I32.pack(len(ext)), ext))
    head = {"code": cmd.code, "language": cmd.language, "version": cmd.version, "opaque": cmd.opaque,
            "flag": cmd.flag, "extFields": cmd.ext, "serializeTypeCurrentRPC": "JSON"}
    if cmd.remark is not None:
        head["remark"] = cmd.remark
    return json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _int_field(head: dict, name: str, bits: int, *, required: bool) -> int:
    value = head.get(name)
    if value is None:
        if required:
            raise CommandError(f"header: {name} is missing")
        return 0
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise CommandError(f"header: {name} {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CommandError(f"header: {name} must be a number, got {type(value).__name__}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= value <= hi:
        raise CommandError(f"header: {name} {value} is not a {bits}-bit integer")
    return value


def _decode_json(raw: bytes) -> RemotingCommand:
    try:
        head = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"header: not JSON ({str(exc)[:80]})") from None
    if not isinstance(head, dict):
        raise CommandError(f"header: a JSON {type(head).__name__}, not an object")
    ext = head.get("extFields") or {}
    if not isinstance(ext, dict):
        raise CommandError(f"header: extFields must be an object, got {type(ext).__name__}")
    remark = head.get("remark")
    language = head.get("language")
    return RemotingCommand(
        code=_int_field(head, "code", 32, required=True), opaque=_int_field(head, "opaque", 32, required=False),
        flag=_int_field(head, "flag", 32, required=False), remark=None if remark is None else _text(remark),
        ext={k: v if type(v) is str else _text(v) for k, v in ext.items() if v is not None},  # keys: JSON text
        language=language if isinstance(language, str) else "OTHER",
        version=_int_field(head, "version", 32, required=False), serialize_type=SERIALIZE_JSON)


def _decode_binary(raw: bytes) -> RemotingCommand:
    n = len(raw)
    if n < _BIN_HEAD.size + 4:
        raise CommandError(f"header: {n} bytes; the binary layout needs at least {_BIN_HEAD.size + 8}")
    code, lang, version, opaque, flag = _BIN_HEAD.unpack_from(raw, 0)
    off = _BIN_HEAD.size

    def chunk(what: str) -> bytes:
        nonlocal off
        if off + 4 > n:
            raise CommandError(f"header: {what} length runs past the header end")
        size = _I32.unpack_from(raw, off)[0]
        off += 4
        if size < 0 or off + size > n:
            raise CommandError(f"header: {what} length {size} runs past the header end")
        out = raw[off:off + size]
        off += size
        return out

    try:
        remark_b = chunk("remark")
        ext_b = chunk("extFields")
        if off != n:
            raise CommandError(f"header: {n - off} bytes after the extFields")
        ext: dict[str, str] = {}
        pos = 0
        while pos < len(ext_b):
            if pos + 2 > len(ext_b):
                raise CommandError("header: an extFields key length runs past its end")
            klen = _I16.unpack_from(ext_b, pos)[0]
            pos += 2
            if klen < 0 or pos + klen + 4 > len(ext_b):
                raise CommandError(f"header: extFields key length {klen} runs past its end")
            key = ext_b[pos:pos + klen].decode("utf-8")
            pos += klen
            vlen = _I32.unpack_from(ext_b, pos)[0]
            pos += 4
            if vlen < 0 or pos + vlen > len(ext_b):
                raise CommandError(f"header: extFields value length {vlen} of {key!r} runs past its end")
            ext[key] = ext_b[pos:pos + vlen].decode("utf-8")
            pos += vlen
        remark = remark_b.decode("utf-8") if remark_b else None
    except UnicodeDecodeError:
        raise CommandError("header: a remark or ext field is not UTF-8") from None
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code, opaque, flag, remark, ext, language=language, version=version,
                           serialize_type=SERIALIZE_ROCKETMQ)


def decode_header(serialize_type: int, raw: bytes) -> RemotingCommand:
    if serialize_type == SERIALIZE_JSON:
        return _decode_json(raw)
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _decode_binary(raw)
    raise CommandError(f"header: serialize type {serialize_type} is neither 0 (JSON) nor 1 (ROCKETMQ)")


# -- frames -----------------------------------------------------------------------------------
def encode(cmd: RemotingCommand) -> bytes:
    """One command as one frame."""
    header = encode_header(cmd)
    if len(header) >= 1 << 24:
        raise CommandError(f"header: {len(header)} bytes; the length field holds 24 bits")
    return b"".join((_I32.pack(4 + len(header) + len(cmd.body)),
                     _I32.pack((cmd.serialize_type << 24) | len(header)), header, cmd.body))


def decode_frame(frame: bytes) -> RemotingCommand:
    """The command of one frame's content (after its total length): the type-and-length word,
    the header, the body. ``CommandError`` for anything else."""
    if len(frame) < 4:
        raise CommandError(f"frame: {len(frame)} bytes; the header length word needs 4")
    word = _I32.unpack_from(frame, 0)[0] & 0xFFFFFFFF
    serialize_type, header_len = word >> 24, word & 0xFFFFFF
    if 4 + header_len > len(frame):
        raise CommandError(f"frame: header length {header_len} runs past the frame's {len(frame)} bytes")
    cmd = decode_header(serialize_type, bytes(frame[4:4 + header_len]))
    cmd.body = bytes(frame[4 + header_len:])
    return cmd


class CommandDecoder:
    """Frames from one connection's byte stream: ``feed(data)`` returns each complete frame's
    content (``decode_frame`` turns it into a command: a bad header spoils one frame, not the
    stream); a declared total over ``max_frame_bytes`` or under 4 raises ``CommandError``."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self.spent = False

    def feed(self, data: bytes) -> list[bytes]:
        if self.spent:
            raise CommandError("stream: framing was lost earlier")
        self._buf += data
        out = []
        while len(self._buf) >= 4:
            total = _I32.unpack_from(self._buf, 0)[0]
            if not 4 <= total <= self.max_frame_bytes:
                self.spent = True
                self._buf.clear()
                raise CommandError(f"frame: declared length {total} is not in 4..{self.max_frame_bytes}")
            if len(self._buf) < 4 + total:
                break
            out.append(bytes(self._buf[4:4 + total]))
            del self._buf[:4 + total]
        return out


__all__ = ["MAX_FRAME_BYTES", "CommandDecoder", "CommandError", "RemotingCommand", "decode_frame",
           "decode_header", "encode", "encode_header"]
