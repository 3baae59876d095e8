"""The wire protocol: codes, messages and the envelope codec (checksummed frames)."""

import zlib

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from dledger import errors
from dledger.protocol import (MESSAGE_TYPES, WIRE_VERSION, AppendEntryResponse, DLedgerRequestCode,
                              DLedgerResponseCode, Envelope, FrameError, GetEntriesResponse, HeartBeatRequest,
                              MetadataResponse, PushEntryRequest, PushEntryType, VoteRequest, VoteResult,
                              decode_envelope, encode_envelope, request_code_of)


def frame(obj) -> bytes:
    """``obj`` packed as a frame with a correct checksum (so decoding reaches the contents)."""
    body = msgpack.packb(obj, use_bin_type=True)
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_codes_have_javas_numbers():
    assert DLedgerRequestCode.PUSH == 51004 and DLedgerRequestCode.METADATA == 50000
    assert DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT == 502
    assert DLedgerResponseCode.LEADER_PENDING_FULL == 503
    assert DLedgerResponseCode.TERM_NOT_READY == 416
    assert DLedgerResponseCode.INSTALL_SNAPSHOT_ERROR == 508
    assert DLedgerResponseCode.of(12345) is DLedgerResponseCode.UNKNOWN
    # errors carries plain ints that compare equal to the enum
    assert errors.INCONSISTENT_STATE == DLedgerResponseCode.INCONSISTENT_STATE
    assert [r.name for r in VoteResult][:3] == ["UNKNOWN", "ACCEPT", "REJECT_UNKNOWN_LEADER"]


def test_messages_are_slotted_and_keyword_only():
    with pytest.raises(TypeError):
        VoteRequest("g")  # positional arguments are refused
    assert not hasattr(VoteRequest(), "__dict__")


def test_every_message_type_round_trips_with_defaults():
    for cls, code in MESSAGE_TYPES:
        env = Envelope("n0", "n1", 7, cls.__name__.endswith("Response"), cls())
        back = decode_envelope(encode_envelope(env))
        assert back == env and request_code_of(back.msg) == code


def test_push_carries_raw_record_bytes():
    req = PushEntryRequest(group="g", term=3, type=PushEntryType.APPEND, entries=b"\x00" * 96,
                           first_entry_index=5, count=2, last_entry_term=3, commit_index=4)
    back = decode_envelope(encode_envelope(Envelope("a", "b", 1, False, req))).msg
    assert back.entries == b"\x00" * 96 and back.last_entry_index == 6 and back.total_size == 96


names = st.text(min_size=0, max_size=8)
ints = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(group=names, leader=st.none() | names, term=ints, commit=ints, rid=ints, resp=st.booleans())
def test_heartbeat_round_trip_property(group, leader, term, commit, rid, resp):
    env = Envelope("x", "y", rid, resp, HeartBeatRequest(group=group, leader_id=leader, term=term,
                                                         commit_index=commit))
    assert decode_envelope(encode_envelope(env)) == env


@given(st.binary(max_size=200))
def test_garbage_raises_frame_error_only(data):
    try:
        decode_envelope(data)
    except FrameError:
        pass


@pytest.mark.parametrize("obj", [
    [2, "a", "b", 1, False, 0, []],                       # field count
    [99, "a", "b", 1, False, 0, []],                      # version
    [1, "a", "b", 1, False, 99, []],                      # tag
    [1, "a", "b", 1, False, 0, [1]],                      # field count
    [1, "a", "b", 1, False, 2, ["g", "r", "l", "200", None, 1, 1]],  # type of code
    [1, "a", "b", 1, False, 2, ["g", "r", "l", 200, None, 1 << 64 - 1, 1]],
    {"a": 1},
    [2, "a", "b", 1, False, 10, ["g", "r", "l", 200, None, 1, ["not bytes"]]],     # list items
    [2, "a", "b", 1, False, 8, ["g", "r", "l", 200, None, 1, 1, 2, ["x"]]],       # positions
    [2, "a", "b", 1, False, 12, ["g", "r", "l", 200, None, 1, {"n0": 5}]],         # peers values
])
def test_malformed_envelopes_are_rejected_with_a_reason(obj):
    with pytest.raises(FrameError):
        decode_envelope(msgpack.packb(obj))
    with pytest.raises(FrameError):
        decode_envelope(frame(obj))


def test_a_version_1_frame_is_refused():
    old = msgpack.packb([1, "a", "b", 1, False, 0, ["g", "r", "l", 200, None, 1, 1, 1, False]])
    with pytest.raises(FrameError):
        decode_envelope(old)
    with pytest.raises(FrameError, match="version"):
        decode_envelope(frame([1, "a", "b", 1, False, 0, ["g", "r", "l", 200, None, 1, 1, 1, False]]))


def test_a_frame_ends_with_the_crc32_of_its_body():
    data = encode_envelope(Envelope("a", "b", 1, False, VoteRequest(term=3)))
    assert WIRE_VERSION == 2
    assert int.from_bytes(data[-4:], "big") == zlib.crc32(data[:-4])
    assert msgpack.unpackb(data[:-4])[0] == WIRE_VERSION


def test_list_and_dict_fields_round_trip_with_valid_items():
    for msg in (GetEntriesResponse(entries=[b"a", b"bc"]), MetadataResponse(peers={"n0": "h:1"}),
                AppendEntryResponse(positions=[1, 2, 3])):
        env = Envelope("a", "b", 1, True, msg)
        assert decode_envelope(encode_envelope(env)) == env


def test_non_bytes_are_refused_as_frames():
    for bad in (None, "text", 12, [1, 2]):
        with pytest.raises(FrameError):
            decode_envelope(bad)


messages = st.sampled_from([cls for cls, _ in MESSAGE_TYPES]).map(lambda cls: cls())
envelopes = st.builds(Envelope, names, names, ints, st.booleans(), messages)


@settings(max_examples=300)
@given(env=envelopes, data=st.data())
def test_any_single_bit_flip_in_a_frame_is_detected(env, data):
    wire = bytearray(encode_envelope(env))
    bit = data.draw(st.integers(0, len(wire) * 8 - 1))
    wire[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(FrameError):
        decode_envelope(bytes(wire))


def _decodes_or_refuses(data: bytes) -> None:
    """The codec's contract: a valid envelope (that re-encodes to itself) or FrameError."""
    try:
        env = decode_envelope(data)
    except FrameError:
        return
    assert isinstance(env, Envelope)
    assert decode_envelope(encode_envelope(env)) == env


mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.binary(min_size=1, max_size=8)),
)


def _mutate(data: bytes, muts) -> bytes:
    out = bytearray(data)
    for kind, at, what in muts:
        if not out:
            break
        i = at % len(out)
        if kind == "flip":
            out[i] ^= what or 1
        elif kind == "cut":
            del out[i:i + 1 + what % 8]
        else:
            out[i:i] = what
    return bytes(out)


@settings(max_examples=300)
@given(env=envelopes, muts=st.lists(mutations, min_size=1, max_size=4), recrc=st.booleans())
def test_mutated_frames_decode_to_a_valid_envelope_or_raise_frame_error(env, muts, recrc):
    body = encode_envelope(env)[:-4]
    if recrc:       # mutate the body and fix the checksum: the contents' checks must hold alone
        body = _mutate(body, muts)
        _decodes_or_refuses(body + zlib.crc32(body).to_bytes(4, "big"))
    else:
        _decodes_or_refuses(_mutate(body + zlib.crc32(body).to_bytes(4, "big"), muts))


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_with_a_valid_checksum_decode_or_raise_frame_error(body):
    _decodes_or_refuses(body + zlib.crc32(body).to_bytes(4, "big"))


def test_append_response_ok_flag():
    assert AppendEntryResponse(code=200).ok and not AppendEntryResponse(code=502).ok


@pytest.mark.parametrize("body", [
    b"\x91" * 100_000,                       # arrays nested 100 000 deep
    b"\xdd\xff\xff\xff\xff",                 # an array that claims 4 G items
    b"\xc6\xff\xff\xff\xff" + b"x" * 10,     # a bin that claims 4 GiB
    b"\xd9\x02\xff\xfe",                     # a str that is not UTF-8
    b"\x97" + b"\xc1" * 7,                   # a byte msgpack never uses
])
def test_hostile_bodies_with_a_valid_checksum_raise_frame_error(body):
    with pytest.raises(FrameError):
        decode_envelope(body + zlib.crc32(body).to_bytes(4, "big"))


@pytest.mark.parametrize("version", [0, 1, 3, 1 << 40, -1])
@pytest.mark.parametrize("tag", range(len(MESSAGE_TYPES)))
def test_a_request_of_another_wire_version_carries_its_unsupported_answer(version, tag):
    """Scenario BI-03: a frame of another version is refused (a ``FrameError`` naming the
    version); when it is a request of a known type, the error carries the answer to send back:
    that type's response, at this version, code UNSUPPORTED, the request id echoed, addressed
    to the sender. A response or an unknown tag gets no answer."""
    from dledger.protocol import UnsupportedVersion, decode_envelope, encode_envelope
    cls, code = MESSAGE_TYPES[tag]
    for is_response in (False, True):
        with pytest.raises(UnsupportedVersion, match="version") as exc:
            decode_envelope(frame([version, "c1", "n0", 41, is_response, tag, ["g", "x"]]))
        answer = exc.value.answer
        if is_response or cls.__name__.endswith("Response"):
            assert answer is None
            continue
        assert (answer.src, answer.dst, answer.request_id, answer.is_response) == ("n0", "c1", 41, True)
        assert type(answer.msg).__name__.endswith("Response") and answer.msg.code == 303      # UNSUPPORTED
        assert dict(MESSAGE_TYPES)[type(answer.msg)] == code and answer.msg.group == "g"
        assert decode_envelope(encode_envelope(answer)) == answer
    with pytest.raises(UnsupportedVersion) as exc:
        decode_envelope(frame([version, "c1", "n0", 41, False, len(MESSAGE_TYPES), []]))
    assert exc.value.answer is None


# -- GetEntriesRequest.read_mode --------------------------------------------------------------

def test_a_get_request_carries_its_read_mode_and_defaults_to_read_index():
    from dledger.protocol import GetEntriesRequest, ReadMode
    assert GetEntriesRequest().read_mode == ReadMode.READ_INDEX_READ
    for mode in ReadMode:
        env = Envelope("c1", "n0", 3, False, GetEntriesRequest(group="g", begin_index=7, read_mode=mode))
        back = decode_envelope(encode_envelope(env))
        assert back == env and back.msg.read_mode == mode and type(back.msg.read_mode) is int


def test_a_get_request_without_the_read_mode_field_decodes_with_read_index():
    """An older client's frame, which ends before ``read_mode``, decodes with the default."""
    from dledger.protocol import GetEntriesRequest, ReadMode
    tag = [cls for cls, _ in MESSAGE_TYPES].index(GetEntriesRequest)
    old = decode_envelope(frame([WIRE_VERSION, "c1", "n0", 3, False, tag, ["g", "n0", "c1", 200, None, -1, 7, 0, []]]))
    assert old.msg.begin_index == 7 and old.msg.read_mode == ReadMode.READ_INDEX_READ


@pytest.mark.parametrize("bad", ["READ_INDEX_READ", 2.0, True, None, [2]])
def test_a_read_mode_of_the_wrong_type_is_refused_by_the_codec(bad):
    from dledger.protocol import GetEntriesRequest
    tag = [cls for cls, _ in MESSAGE_TYPES].index(GetEntriesRequest)
    with pytest.raises(FrameError, match="read_mode"):
        decode_envelope(frame([WIRE_VERSION, "c1", "n0", 3, False, tag,
                               ["g", "n0", "c1", 200, None, -1, 7, 0, [], bad]]))


@pytest.mark.parametrize("bad", [-1, 4, 99, -(1 << 63), (1 << 63) - 1])
def test_a_read_mode_that_names_no_mode_decodes_and_is_out_of_range(bad):
    """The codec checks types; ``out_of_range`` (asked first by the node: UNEXPECTED_ARGUMENT,
    nothing else done) refuses a number that is no ``ReadMode``."""
    from dledger.protocol import GetEntriesRequest, ReadMode, out_of_range
    env = decode_envelope(encode_envelope(Envelope("c1", "n0", 3, False, GetEntriesRequest(read_mode=bad))))
    assert "read_mode" in out_of_range(env.msg, 0)
    assert out_of_range(GetEntriesRequest(read_mode="LEASE_READ"), 0) is not None     # in process: no coercion
    assert all(out_of_range(GetEntriesRequest(read_mode=m), 0) is None for m in ReadMode)
