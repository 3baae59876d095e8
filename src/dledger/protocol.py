"""Messages between nodes: one slotted dataclass per request/response, the codes, the codec.

Names and fields follow Java DLedger's protocol classes in snake_case; what differs, on purpose,
and the fields added at the end of a message (a frame without them decodes with their defaults)
are listed in docs/architecture.md, "The wire protocol". ``out_of_range`` range-checks every
term, index, count, position and mode field of a message from a peer (``PEER_TERM_BOUND``);
``check_in_range`` raises its refusal as ``errors.PeerProtocolError``.

Wire format: an ``Envelope`` (source, destination, request id, response flag, message) packed
with msgpack as ``[2, src, dst, request_id, is_response, tag, [field values...]]``, followed by
the CRC-32 of those bytes (4 bytes, big-endian). Decoding checks the checksum first (a frame
damaged in transit is refused, never read as a different message), then the version (a request
of another version raises ``UnsupportedVersion``, a ``FrameError`` carrying the UNSUPPORTED
answer to send back), the tag,
the field count (fields added later may be missing, see above), every field's type and the
items of list and dict fields. Any bytes either decode to a valid envelope or raise
``FrameError`` (a ``ValueError``); it never trusts a length.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

import reprlib

import msgpack

from dledger.entry import MAX_TERM, crc32  # zlib-ng's CRC-32 when installed: 5x zlib's on a push
from dledger.errors import DLedgerResponseCode, PeerProtocolError  # the codes' one home: errors

#: 2: a CRC-32 trailer follows the msgpack body (1 had none)
WIRE_VERSION = 2
CRC_BYTES = 4
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(ValueError):
    """Bytes that do not decode to a valid envelope."""


class UnsupportedVersion(FrameError):
    """A frame with a sound checksum and envelope header but another wire version. ``answer``
    is what to send back when the frame is a request of a known type: that type's response,
    at this version, with code UNSUPPORTED, the request id echoed (else None: nothing to
    answer). The envelope layout and the checksum trailer are what every version keeps."""

    def __init__(self, message: str, answer: "Envelope | None") -> None:
        super().__init__(message)
        self.answer = answer


class DLedgerRequestCode(IntEnum):
    UNKNOWN = -1
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005
    INSTALL_SNAPSHOT = 51006
    #: dledger's own: a membership change asked of the leader (``MembershipRequest``)
    MEMBERSHIP = 51007
    USER_DEFINE_REQUEST = 59999


class PushEntryType(IntEnum):
    APPEND = 0
    COMMIT = 1
    COMPARE = 2
    TRUNCATE = 3
    INSTALL_SNAPSHOT = 4


class VoteResult(IntEnum):
    """Java's ``VoteResponse.RESULT`` in its declaration order."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11
    #: the voter may have lost what it acknowledged or a vote it cast (protocol-aware
    #: recovery, docs/architecture.md): it votes in no round but a ``unanimous`` one
    REJECT_RECOVERING = 12


class ReadMode(IntEnum):
    UNSAFE_READ = 0
    RAFT_LOG_READ = 1
    READ_INDEX_READ = 2
    LEASE_READ = 3

    @classmethod
    def parse(cls, mode: Any) -> "ReadMode":
        """``mode`` as a ``ReadMode``: a member, its number, or its name in any case
        (``"LEASE_READ"``, ``"lease_read"``); anything else raises ``ValueError`` naming the
        valid modes."""
        if isinstance(mode, cls):
            return mode
        if isinstance(mode, int) and not isinstance(mode, bool) and mode in cls._value2member_map_:
            return cls(mode)
        if isinstance(mode, str) and mode.upper() in cls.__members__:
            return cls[mode.upper()]
        valid = ", ".join(f"{m.name} ({m.value})" for m in cls)
        raise ValueError(f"unknown read mode {mode!r}; valid modes: {valid}")


#: How far above its own term a node accepts a peer's term beyond ``PEER_TERM_BOUND``.
TERM_STEP = 1 << 20
#: The largest term a peer may move this node to in one step: ``MAX_TERM`` (the format
#: layer's limit for every term, in files and on the wire) less ``TERM_STEP``. Terms above it
#: are accepted only as small steps above the node's own term and never beyond ``MAX_TERM``, so
#: a hostile or corrupt message cannot push the cluster to a term it can never increment again.
PEER_TERM_BOUND = MAX_TERM - TERM_STEP
INT64_MAX = (1 << 63) - 1
#: int fields that are codes or enums, not terms, indexes, counts or positions
_NOT_RANGED = frozenset(("code", "type", "vote_result", "read_mode"))


def term_acceptable(term: int, own_term: int) -> bool:
    """Whether a peer's ``term`` may be adopted by a node in ``own_term``."""
    return term <= PEER_TERM_BOUND or (term <= MAX_TERM and term <= own_term + TERM_STEP)


SUCCESS = DLedgerResponseCode.SUCCESS

_dc = dataclass(slots=True, kw_only=True)


@_dc
class RequestOrResponse:
    group: str = ""
    remote_id: str = ""
    local_id: str = ""
    code: int = 200
    leader_id: str | None = None
    term: int = -1


@_dc
class VoteRequest(RequestOrResponse):
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    leadership_transfer: bool = False
    #: a round that passes only with the votes of every member; a recovering voter (whose
    #: term is known) may grant it (docs/architecture.md, protocol-aware recovery)
    unanimous: bool = False
    #: the candidate's members, as ``peers_text`` writes them: a voter whose own differ refuses
    #: (PEERS_MISMATCH); empty: not sent (no check)
    members: str = ""
    #: the index of the configuration entry in force at the candidate (-1: the bootstrap one): a
    #: voter whose configuration does not name the candidate refuses it unless this is newer
    config_index: int = -1


@_dc
class VoteResponse(RequestOrResponse):
    vote_result: int = VoteResult.UNKNOWN
    #: the voter is recovering (also when it answers a unanimous round): a candidate that
    #: hears more than a minority recovering asks for a unanimous round next
    recovering: bool = False
    #: with PEERS_MISMATCH: the voter's members (``peers_text``); empty otherwise
    members: str = ""
    #: with REJECT_UNKNOWN_LEADER: the index of the voter's committed configuration entry that
    #: leaves the candidate out (a candidate whose own is older learns it was removed); -1 otherwise
    config_index: int = -1


@_dc
class HeartBeatRequest(RequestOrResponse):
    commit_index: int = -1
    #: the leader's members (``peers_text``): a follower whose own differ refuses
    #: (PEERS_MISMATCH); empty: not sent (no check)
    members: str = ""
    #: the index of the configuration entry in force at the leader (-1: the bootstrap one): a
    #: follower follows a leader its own configuration does not name only when it is newer
    config_index: int = -1


@_dc
class HeartBeatResponse(RequestOrResponse):
    #: the follower is recovering: its answers confirm the leader but count toward no commit
    recovering: bool = False
    #: with ``recovering``: the follower's incarnation (a number drawn per process), which
    #: the leader's pushes echo (``PushEntryRequest.incarnation``); 0 otherwise
    incarnation: int = 0
    #: with PEERS_MISMATCH: the follower's members (``peers_text``); empty otherwise
    members: str = ""


@_dc
class PushEntryRequest(RequestOrResponse):
    pre_log_index: int = -1
    pre_log_term: int = -1
    commit_index: int = -1
    type: int = PushEntryType.APPEND
    entries: bytes = b""
    first_entry_index: int = -1
    count: int = 0
    last_entry_term: int = -1
    #: the incarnation of the recovering follower this push goes to, as the leader heard it in
    #: an answer saying ``recovering`` and after forgetting that follower's water mark (0:
    #: none); only a push naming its own incarnation can end a follower's recovery
    incarnation: int = 0

    @property
    def last_entry_index(self) -> int:
        return self.first_entry_index + self.count - 1 if self.count else -1

    @property
    def total_size(self) -> int:
        return len(self.entries)


@_dc
class PushEntryResponse(RequestOrResponse):
    type: int = PushEntryType.APPEND
    index: int = -1
    begin_index: int = -1
    end_index: int = -1
    count: int = 0
    x_term: int = -1
    x_index: int = -1
    #: the follower is recovering: its water mark counts toward no commit (see HeartBeatResponse)
    recovering: bool = False
    #: with ``recovering``: the follower's incarnation (see HeartBeatResponse); 0 otherwise
    incarnation: int = 0


@_dc
class AppendEntryRequest(RequestOrResponse):
    body: bytes = b""


@_dc
class BatchAppendEntryRequest(RequestOrResponse):
    batch_msgs: list = field(default_factory=list)


@_dc
class AppendEntryResponse(RequestOrResponse):
    index: int = -1
    pos: int = -1
    positions: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == SUCCESS


@_dc
class GetEntriesRequest(RequestOrResponse):
    begin_index: int = -1
    max_size: int = 0
    index_list: list = field(default_factory=list)
    #: the ``ReadMode`` (its number) the get is served in; absent on the wire: READ_INDEX_READ
    read_mode: int = ReadMode.READ_INDEX_READ


@_dc
class GetEntriesResponse(RequestOrResponse):
    entries: list = field(default_factory=list)   # encoded records


@_dc
class MetadataRequest(RequestOrResponse):
    pass


@_dc
class MetadataResponse(RequestOrResponse):
    peers: dict = field(default_factory=dict)
    #: the answering node's log end and vote (a recovering node relearns its term from them)
    ledger_end_index: int = -1
    vote_for: str | None = None
    #: what ``dledger status`` shows: the node's role (``LEADER``, ``FOLLOWER``,
    #: ``CANDIDATE``; empty from a node that does not send it), the term of its last entry,
    #: and its commit index (-1 from a node that does not send them)
    role: str = ""
    ledger_end_term: int = -1
    committed_index: int = -1
    #: why the node knows no leader, as its periodic WARNING says it (empty when it knows one)
    waiting: str = ""
    #: the largest entry body the node's store takes (its data segment size less the blank and
    #: the header it needs, at most 4 MiB less the header); -1 from a node that does not send it
    max_body_size: int = -1
    #: the configuration in force at the node: voters and learners (id -> address; no voter:
    #: none yet), the index of the entry that made it (-1: bootstrap), and, from a leader, each
    #: member's match index (the highest index it is known to hold)
    voters: dict = field(default_factory=dict)
    learners: dict = field(default_factory=dict)
    config_index: int = -1
    match_index: dict = field(default_factory=dict)


@_dc
class PullEntriesRequest(RequestOrResponse):
    node_id: str = ""
    begin_index: int = -1


@_dc
class PullEntriesResponse(RequestOrResponse):
    entries: list = field(default_factory=list)
    #: the answering node's log ends before ``begin_index``: it holds no entry there (a repair
    #: pull's answer; a leader whose damaged entry no voter holds may drop it, ``core.damaged_tail``)
    absent: bool = False
    #: the answering node is recovering: it may have lost entries it acknowledged
    recovering: bool = False


@_dc
class LeadershipTransferRequest(RequestOrResponse):
    transfer_id: str | None = None
    transferee_id: str | None = None
    take_leadership_ledger_index: int = -1


@_dc
class LeadershipTransferResponse(RequestOrResponse):
    pass


@_dc
class InstallSnapshotRequest(RequestOrResponse):
    last_included_index: int = -1
    last_included_term: int = -1
    data: bytes = b""
    #: the leader's position of entry ``last_included_index + 1``: where the follower's next
    #: record lands, so that positions stay byte-identical with the leader's (-1: none sent)
    next_pos: int = -1
    #: the leader's commit index (as on a push)
    commit_index: int = -1
    #: the incarnation of the recovering follower it goes to (see ``PushEntryRequest``)
    incarnation: int = 0
    #: a state-machine snapshot's chunk (``data``): the snapshot's size (-1: no snapshot, the
    #: log start moves alone) and CRC-32, and this chunk's offset in it and CRC-32
    total_size: int = -1
    data_crc: int = -1
    offset: int = 0
    chunk_crc: int = -1
    #: the configuration in force at ``last_included_index`` (``Configuration.encode``; empty:
    #: none sent) and the index and term of the entry that made it
    config: bytes = b""
    config_index: int = -1
    config_term: int = -1


@_dc
class InstallSnapshotResponse(RequestOrResponse):
    #: the follower's log end after the install (or as it stood, when refused)
    end_index: int = -1
    #: the follower is recovering (see ``HeartBeatResponse``), and its incarnation
    recovering: bool = False
    incarnation: int = 0
    #: the snapshot bytes the follower holds durably: the next chunk starts there (-1: none)
    received: int = -1


@_dc
class MembershipRequest(RequestOrResponse):
    """A membership change asked of the leader: ``op`` is ``add_learner`` (``node_id`` at
    ``address``), ``promote`` or ``remove`` (``node_id``)."""

    op: str = ""
    node_id: str = ""
    address: str = ""


@_dc
class MembershipResponse(RequestOrResponse):
    #: the index of the configuration entry (SUCCESS: committed); -1 when refused
    index: int = -1
    #: why it was refused, in words (empty on SUCCESS)
    message: str = ""
    #: the configuration after the change (SUCCESS) or as it stands (refused)
    voters: dict = field(default_factory=dict)
    learners: dict = field(default_factory=dict)


#: (class, request code) by wire tag. Tags are stable: append only.
MESSAGE_TYPES: tuple[tuple[type, DLedgerRequestCode], ...] = (
    (VoteRequest, DLedgerRequestCode.VOTE),
    (VoteResponse, DLedgerRequestCode.VOTE),
    (HeartBeatRequest, DLedgerRequestCode.HEART_BEAT),
    (HeartBeatResponse, DLedgerRequestCode.HEART_BEAT),
    (PushEntryRequest, DLedgerRequestCode.PUSH),
    (PushEntryResponse, DLedgerRequestCode.PUSH),
    (AppendEntryRequest, DLedgerRequestCode.APPEND),
    (BatchAppendEntryRequest, DLedgerRequestCode.APPEND),
    (AppendEntryResponse, DLedgerRequestCode.APPEND),
    (GetEntriesRequest, DLedgerRequestCode.GET),
    (GetEntriesResponse, DLedgerRequestCode.GET),
    (MetadataRequest, DLedgerRequestCode.METADATA),
    (MetadataResponse, DLedgerRequestCode.METADATA),
    (PullEntriesRequest, DLedgerRequestCode.PULL),
    (PullEntriesResponse, DLedgerRequestCode.PULL),
    (LeadershipTransferRequest, DLedgerRequestCode.LEADERSHIP_TRANSFER),
    (LeadershipTransferResponse, DLedgerRequestCode.LEADERSHIP_TRANSFER),
    (InstallSnapshotRequest, DLedgerRequestCode.INSTALL_SNAPSHOT),
    (InstallSnapshotResponse, DLedgerRequestCode.INSTALL_SNAPSHOT),
    (MembershipRequest, DLedgerRequestCode.MEMBERSHIP),
    (MembershipResponse, DLedgerRequestCode.MEMBERSHIP),
)
_TAG_OF = {cls: tag for tag, (cls, _code) in enumerate(MESSAGE_TYPES)}


def request_code_of(msg: Any) -> DLedgerRequestCode:
    return MESSAGE_TYPES[_TAG_OF[type(msg)]][1]


_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63),
    "bool": lambda v: isinstance(v, bool),
    "bytes": lambda v: isinstance(v, bytes),
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
}
_is_int = _CHECKS["int"]
#: what the items of list and dict fields must be (a field not named here is a scalar)
_ITEM_CHECKS = {
    "batch_msgs": lambda v: all(isinstance(x, bytes) for x in v),
    "positions": lambda v: all(_is_int(x) for x in v),
    "index_list": lambda v: all(_is_int(x) for x in v),
    "entries": lambda v: isinstance(v, bytes) or all(isinstance(x, bytes) for x in v),
    "peers": lambda v: all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    "voters": lambda v: all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    "learners": lambda v: all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    "match_index": lambda v: all(isinstance(k, str) and _is_int(x) for k, x in v.items()),
}


def _check_for(f) -> Any:
    check, items = _CHECKS[f.type], _ITEM_CHECKS.get(f.name)
    if items is None:
        return check
    return lambda v: check(v) and items(v)


_SCHEMA = {cls: tuple((f.name, _check_for(f)) for f in fields(cls)) for cls, _ in MESSAGE_TYPES}
#: fields added at the end of a message after the first wire version: a frame from an older
#: peer may end before them, and they take their defaults
_ADDED_FIELDS = {VoteRequest: ("unanimous", "members", "config_index"), VoteResponse: ("recovering", "members", "config_index"),
                 HeartBeatRequest: ("members", "config_index"),
                 HeartBeatResponse: ("recovering", "incarnation", "members"), PushEntryRequest: ("incarnation",),
                 PushEntryResponse: ("recovering", "incarnation"), GetEntriesRequest: ("read_mode",),
                 PullEntriesResponse: ("absent", "recovering"),
                 InstallSnapshotRequest: ("next_pos", "commit_index", "incarnation", "total_size", "data_crc",
                                          "offset", "chunk_crc", "config", "config_index", "config_term"),
                 InstallSnapshotResponse: ("end_index", "recovering", "incarnation", "received"),
                 MetadataResponse: ("ledger_end_index", "vote_for", "role", "ledger_end_term", "committed_index",
                                    "waiting", "max_body_size", "voters", "learners", "config_index",
                                    "match_index")}
_MIN_FIELDS = {cls: len(schema) - len(_ADDED_FIELDS.get(cls, ())) for cls, schema in _SCHEMA.items()}
assert all(tuple(name for name, _c in _SCHEMA[cls][-len(added):]) == added for cls, added in _ADDED_FIELDS.items())


def _ranged_fields(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.type == "int" and f.name not in _NOT_RANGED)


_RANGED = {cls: _ranged_fields(cls) for cls, _ in MESSAGE_TYPES}
#: int fields that name a member of an enum: (field, enum) per message type
_ENUM_FIELDS = {GetEntriesRequest: (("read_mode", ReadMode),)}


def peers_text(peer_map: dict[str, str]) -> str:
    """A group's members as the vote and heartbeat requests carry them: ``id-address`` pairs,
    sorted by id, joined by ``;`` (the ``--peers`` syntax): two nodes agree on their members
    exactly when these are equal."""
    return ";".join(f"{node_id}-{addr}" for node_id, addr in sorted(peer_map.items()))


def parse_peers_text(text: str) -> dict[str, str]:
    """``peers_text`` read back (a malformed item maps to itself: it only has to be shown)."""
    out: dict[str, str] = {}
    for item in text.split(";"):
        if item:
            node_id, sep, addr = item.partition("-")
            out[node_id if sep else item] = addr if sep else ""
    return out


def out_of_range(msg: Any, own_term: int) -> str | None:
    """Why ``msg`` (from a peer or a client) carries a term, index, count, position or mode
    this node must not act on, or None. Every term, index, count and position field lies in
    ``-1 .. 2**63-1`` (-1: none), every term field passes ``term_acceptable`` against
    ``own_term``, and every mode field is the number of a member of its enum."""
    for name, enum in _ENUM_FIELDS.get(type(msg), ()):
        value = getattr(msg, name)
        if type(value) is not int and not isinstance(value, enum) or value not in enum._value2member_map_:
            return f"{type(msg).__name__}.{name}={value!r} is not a {enum.__name__} number"
    for name in _RANGED.get(type(msg), ()):
        value = getattr(msg, name)
        if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= INT64_MAX:
            return f"{type(msg).__name__}.{name}={value!r} is outside -1..2**63-1"
        if name.endswith("term") and not term_acceptable(value, own_term):
            return (f"{type(msg).__name__}.{name}={value} is above the term bound {PEER_TERM_BOUND} "
                    f"and more than {TERM_STEP} above the local term {own_term} (or above {MAX_TERM})")
    return None


def check_in_range(msg: Any, own_term: int) -> None:
    """Raise ``PeerProtocolError`` (saying why) when ``out_of_range`` refuses ``msg``."""
    why = out_of_range(msg, own_term)
    if why is not None:
        raise PeerProtocolError(why)


@dataclass(slots=True)
class Envelope:
    """One message on its way: who sent it, to whom, and which request it is or answers."""

    src: str
    dst: str
    request_id: int
    is_response: bool
    msg: Any


def wire_values(msg: Any) -> tuple[int, list]:
    """``msg``'s wire tag and its field values in wire order (``TypeError`` for anything that
    is not a protocol message): what ``encode_envelope`` packs after the envelope's header."""
    tag = _TAG_OF.get(type(msg))
    if tag is None:
        raise TypeError(f"not a protocol message: {type(msg).__name__}")
    return tag, [getattr(msg, name) for name, _check in _SCHEMA[type(msg)]]


def encode_envelope(env: Envelope) -> bytes:
    tag, values = wire_values(env.msg)
    body = msgpack.packb([WIRE_VERSION, env.src, env.dst, env.request_id, env.is_response, tag, values],
                         use_bin_type=True)
    return body + crc32(body).to_bytes(CRC_BYTES, "big")


#: request code -> the response class of that code
_RESPONSE_OF = {code: cls for cls, code in MESSAGE_TYPES if cls.__name__.endswith("Response")}


def _unsupported_answer(src: str, dst: str, request_id: int, is_response: bool, tag, values) -> Envelope | None:
    """UNSUPPORTED, as the response type of a request of another wire version (None for a
    response or an unknown tag: nothing to answer). Its group is the request's first field
    when that is a string, as in every version so far."""
    if is_response or type(tag) is not int or not 0 <= tag < len(MESSAGE_TYPES):
        return None
    cls, code = MESSAGE_TYPES[tag]
    if cls is _RESPONSE_OF.get(code):
        return None
    group = values[0] if isinstance(values, list) and values and isinstance(values[0], str) else ""
    return Envelope(dst, src, request_id, True, _RESPONSE_OF[code](
        group=group, local_id=dst, remote_id=src, code=DLedgerResponseCode.UNSUPPORTED))


def decode_envelope(data: bytes) -> Envelope:
    """Decode one frame; ``FrameError`` says what is wrong with it (nothing else is raised)."""
    return envelope_of(unpack_body(checked_body(data)))


def checked_body(data) -> memoryview:
    """The msgpack part of frame ``data`` (a view of it), once its type, length and CRC-32
    trailer are checked; ``FrameError`` otherwise."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FrameError(f"a frame is bytes, not {type(data).__name__}")
    try:
        data = memoryview(data).cast("B")
    except (TypeError, ValueError):
        raise FrameError("a frame is one contiguous run of bytes") from None
    if len(data) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    if len(data) < CRC_BYTES:
        raise FrameError(f"frame of {len(data)} bytes is shorter than its checksum")
    body = data[:-CRC_BYTES]
    if crc32(body) != int.from_bytes(data[-CRC_BYTES:], "big"):
        raise FrameError("checksum mismatch: the frame was damaged in transit")
    return body


def unpack_body(body) -> Any:
    """msgpack's reading of a checked body; ``FrameError`` when it is not msgpack."""
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise FrameError(f"malformed msgpack: {exc}") from None


def envelope_of(obj: Any) -> Envelope:
    """The envelope an unpacked body holds, every field checked; ``FrameError`` otherwise."""
    if not isinstance(obj, list) or len(obj) != 7:
        raise FrameError("an envelope is a list of 7 items")
    version, src, dst, request_id, is_response, tag, values = obj
    header_ok = (isinstance(src, str) and isinstance(dst, str) and isinstance(is_response, bool)
                 and _is_int(request_id))
    if type(version) is not int or version != WIRE_VERSION:         # 2.0 == 2, True == 1: not versions
        why = f"unsupported wire version {reprlib.repr(version)}"
        if type(version) is int and header_ok:
            raise UnsupportedVersion(why, _unsupported_answer(src, dst, request_id, is_response, tag, values))
        raise FrameError(why)
    if not header_ok:
        raise FrameError("bad envelope header")
    if not isinstance(tag, int) or isinstance(tag, bool) or not 0 <= tag < len(MESSAGE_TYPES):
        raise FrameError(f"unknown message tag {reprlib.repr(tag)}")
    cls = MESSAGE_TYPES[tag][0]
    schema = _SCHEMA[cls]
    if not isinstance(values, list) or not _MIN_FIELDS[cls] <= len(values) <= len(schema):
        raise FrameError(f"{cls.__name__} needs {len(schema)} fields")
    kwargs = {}
    for (name, check), value in zip(schema, values):
        if not check(value):
            # reprlib: a value nested thousands deep must not blow the stack while we name it
            raise FrameError(f"{cls.__name__}.{name}: bad value {reprlib.repr(value)}")
        kwargs[name] = value
    return Envelope(src, dst, request_id, is_response, cls(**kwargs))
