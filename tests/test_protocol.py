import msgpack
import pytest
from hypothesis import given, strategies as st

from dledger import errors
from dledger.protocol import (MESSAGE_TYPES, AppendEntryResponse, DLedgerRequestCode, DLedgerResponseCode,
                              Envelope, FrameError, HeartBeatRequest, PushEntryRequest, PushEntryType,
                              VoteRequest, VoteResult, decode_envelope, encode_envelope, request_code_of)


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
    [2, "a", "b", 1, False, 0, []],                       # version
    [1, "a", "b", 1, False, 99, []],                      # tag
    [1, "a", "b", 1, False, 0, [1]],                      # field count
    [1, "a", "b", 1, False, 2, ["g", "r", "l", "200", None, 1, 1]],  # type of code
    [1, "a", "b", 1, False, 2, ["g", "r", "l", 200, None, 1 << 64 - 1, 1]],
    {"a": 1},
])
def test_malformed_envelopes_are_rejected_with_a_reason(obj):
    with pytest.raises(FrameError):
        decode_envelope(msgpack.packb(obj))


def test_append_response_ok_flag():
    assert AppendEntryResponse(code=200).ok and not AppendEntryResponse(code=502).ok
