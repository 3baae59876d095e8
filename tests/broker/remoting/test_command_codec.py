"""The remoting frame and header codecs, byte for byte: both header forms round-trip any
command (hypothesis), the layouts match RocketMQ's field by field, and bytes that are not a
command raise ``CommandError`` naming the part, never anything else."""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker.remoting import codes
from dledger.broker.remoting.command import (CommandDecoder, CommandError, RemotingCommand, decode_frame,
                                             decode_header, encode, encode_header)

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(1 << 15), (1 << 15) - 1), opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(-(1 << 31), (1 << 31) - 1), remark=st.one_of(st.none(), texts.filter(bool)),
    ext=st.dictionaries(texts, texts, max_size=6), body=st.binary(max_size=200),
    language=st.sampled_from(codes.LANGUAGES), version=st.integers(-(1 << 15), (1 << 15) - 1),
    serialize_type=st.sampled_from([codes.SERIALIZE_JSON, codes.SERIALIZE_ROCKETMQ]))


def strip(frame: bytes) -> bytes:
    total = struct.unpack(">i", frame[:4])[0]
    assert total == len(frame) - 4
    return frame[4:]


@settings(max_examples=300, deadline=None)
@given(commands)
def test_every_command_round_trips_in_both_header_forms(cmd):
    back = decode_frame(strip(encode(cmd)))
    assert back == cmd


@settings(max_examples=100, deadline=None)
@given(st.lists(commands, min_size=1, max_size=5), st.data())
def test_a_stream_cut_anywhere_gives_the_same_commands(cmds, data):
    stream = b"".join(encode(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    decoder, frames, last = CommandDecoder(), [], 0
    for cut in cuts + [len(stream)]:
        frames += decoder.feed(stream[last:cut])
        last = cut
    assert [decode_frame(f) for f in frames] == cmds


def test_the_binary_header_is_rocketmqs_layout():
    cmd = RemotingCommand(code=105, opaque=7, flag=0, remark="r", ext={"topic": "T"}, language="CPP", version=3,
                          serialize_type=codes.SERIALIZE_ROCKETMQ)
    header = encode_header(cmd)
    assert header == (struct.pack(">hbhii", 105, 1, 3, 7, 0) + struct.pack(">i", 1) + b"r"
                      + struct.pack(">i", 2 + 5 + 4 + 1) + struct.pack(">h", 5) + b"topic" + struct.pack(">i", 1) + b"T")
    frame = encode(cmd)
    assert struct.unpack(">ii", frame[:8]) == (4 + len(header), (1 << 24) | len(header))


def test_a_json_header_is_what_the_clients_read_and_numbers_become_text():
    cmd = RemotingCommand(code=0, opaque=9, flag=1, ext={"queueId": "3"})
    head = json.loads(encode_header(cmd))
    assert head["code"] == 0 and head["opaque"] == 9 and head["flag"] == 1 and head["extFields"] == {"queueId": "3"}
    # the C++ client sends some fields as JSON numbers, others as strings
    raw = json.dumps({"code": 10, "opaque": 5, "flag": 0, "language": "CPP", "version": 0,
                      "extFields": {"queueId": 2, "sysFlag": 0, "batch": False, "topic": "T", "AccessKey": None}})
    back = decode_header(0, raw.encode())
    assert back.ext == {"queueId": "2", "sysFlag": "0", "batch": "false", "topic": "T"} and back.code == 10


def test_a_reply_echoes_the_opaque_sets_the_response_bit_and_keeps_the_header_form():
    req = RemotingCommand(code=10, opaque=42, flag=0, serialize_type=codes.SERIALIZE_ROCKETMQ)
    rep = req.reply(codes.SUCCESS, None, {"queueOffset": 5, "skip": None})
    assert rep.opaque == 42 and rep.is_response and rep.serialize_type == codes.SERIALIZE_ROCKETMQ
    assert rep.ext == {"queueOffset": "5"}
    assert RemotingCommand(code=10, flag=codes.FLAG_ONEWAY).oneway


@pytest.mark.parametrize("serialize_type, header, words", [
    (0, b"{not json", "not JSON"),
    (0, b"[1, 2]", "not an object"),
    (0, b'{"opaque": 1}', "code is missing"),
    (0, b'{"code": "x"}', "not a number"),
    (0, b'{"code": 1, "extFields": [1]}', "extFields must be an object"),
    (0, b'{"code": 99999999999}', "32-bit"),
    (0, b"\xff\xfe", "not JSON"),
    (1, b"\x00\x01", "binary layout"),
    (1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 99), "remark length"),
    (1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", -1), "remark length -1"),
    (1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 3) + b"\x00\x09x", "key length"),
    (1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 0) + b"extra", "after the extFields"),
    (1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 2) + b"\xff\xfe" + struct.pack(">i", 0), "UTF-8"),
    (7, b"{}", "serialize type 7"),
])
def test_a_header_that_is_not_a_command_is_an_error_naming_the_part(serialize_type, header, words):
    with pytest.raises(CommandError, match=words):
        decode_header(serialize_type, header)


def test_a_frame_whose_header_length_runs_past_it_is_an_error():
    with pytest.raises(CommandError, match="header length 50"):
        decode_frame(struct.pack(">i", 50) + b"{}")
    with pytest.raises(CommandError, match="needs 4"):
        decode_frame(b"\x00")


@pytest.mark.parametrize("total", [0, 3, -1, (16 << 20) + 1])
def test_a_declared_length_out_of_range_spends_the_decoder(total):
    decoder = CommandDecoder()
    with pytest.raises(CommandError, match="declared length"):
        decoder.feed(struct.pack(">i", total) + b"x" * 8)
    with pytest.raises(CommandError, match="framing was lost"):
        decoder.feed(b"")


def test_the_limit_is_checked_before_the_frame_arrives():
    decoder = CommandDecoder(max_frame_bytes=100)
    with pytest.raises(CommandError):
        decoder.feed(struct.pack(">i", 101))      # nothing of the frame yet


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 1), st.binary(max_size=120))
def test_random_header_bytes_decode_or_raise_command_error_only(serialize_type, raw):
    try:
        cmd = decode_header(serialize_type, raw)
    except CommandError:
        return
    assert isinstance(cmd, RemotingCommand)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_streams_give_frames_or_command_error_only(raw):
    decoder = CommandDecoder(max_frame_bytes=1000)
    try:
        frames = decoder.feed(raw)
    except CommandError:
        return
    for f in frames:
        try:
            decode_frame(f)
        except CommandError:
            pass
