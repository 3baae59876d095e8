"""DLedgerEntry codec: the golden bytes of docs/format.md, round-trips, CRC against crcmod, bad input."""

import struct
import zlib

import crcmod.predefined
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dledger.entry import (BODY_OFFSET, HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_NOOP,
                           MAGIC_NORMAL, MAX_INDEX, MAX_TERM, POS_OFFSET, DLedgerEntry, IndexUnit, RecordHeader, crc32,
                           decode, decode_header, decode_index, encode, encode_blank, encode_index,
                           encode_into, is_segment_name, iter_segment_records, magic_matches_unit,
                           matches_unit, segment_name)
from dledger.errors import CorruptEntryError

REFERENCE_CRC = crcmod.predefined.mkCrcFun("crc-32")

HELLO_JAVA = bytes.fromhex(
    "00000001" "00000035" "0000000000000000" "0000000000000001" "0000000000000000"
    "00000000" "00000000" "00000000" "00000005" "68656c6c6f")


def test_constants_match_the_java_layout():
    assert (HEADER_SIZE, BODY_OFFSET, POS_OFFSET, INDEX_UNIT_SIZE) == (44, 48, 24, 32)


def test_spec_example_record_bytes_without_crc_are_javas():
    entry = DLedgerEntry(body=b"hello", magic=1, index=0, term=1, pos=0)
    assert encode(entry, compute_crc=False) == HELLO_JAVA
    assert entry.size == 53


def test_spec_example_record_carries_the_body_crc_at_offset_40():
    entry = DLedgerEntry(body=b"hello", index=0, term=1, pos=0)
    data = encode(entry)
    assert data[:40] == HELLO_JAVA[:40] and data[44:] == HELLO_JAVA[44:]
    assert struct.unpack_from(">I", data, 40)[0] == zlib.crc32(b"hello") == 0x3610A686
    assert entry.body_crc == 0x3610A686


def test_spec_example_index_unit_bytes():
    assert encode_index(1, 0, 53, 0, 1) == bytes.fromhex(
        "00000001" "0000000000000000" "00000035" "0000000000000000" "0000000000000001")
    assert decode_index(encode_index(2, 7, 53, 9, 3)) == IndexUnit(2, 7, 53, 9, 3)


def test_blank_record_is_minus_one_length_then_zeros():
    blank = encode_blank(20)
    assert blank == struct.pack(">ii", -1, 20) + bytes(12)
    assert struct.unpack_from(">i", blank)[0] == MAGIC_BLANK
    with pytest.raises(ValueError):
        encode_blank(7)


def test_decoding_the_java_example_reads_every_field_and_skips_a_zero_crc():
    entry = decode(HELLO_JAVA)
    assert (entry.magic, entry.size, entry.index, entry.term, entry.pos, entry.body) == \
        (1, 53, 0, 1, 0, b"hello")
    assert entry.body_crc == 0 and entry.crc_ok()


def test_a_100_byte_body_encodes_to_148_bytes_and_pos_sits_at_offset_24():
    entry = DLedgerEntry(body=bytes(range(100)), index=5, term=2, pos=123456, channel=7, chain_crc=9)
    data = encode(entry)
    assert len(data) == entry.size == 148
    assert struct.unpack_from(">q", data, POS_OFFSET)[0] == 123456
    back = decode(data)
    assert back == entry and back.channel == 7 and back.chain_crc == 9 and back.body_crc == entry.body_crc


def test_equality_ignores_crcs_but_not_body_channel_or_pos():
    a = DLedgerEntry(body=b"x", index=1, term=1, pos=0)
    b = DLedgerEntry(body=b"x", index=1, term=1, pos=0, body_crc=5, chain_crc=6)
    assert a == b and hash(a) == hash(b)
    assert a != DLedgerEntry(body=b"y", index=1, term=1, pos=0)
    assert a != DLedgerEntry(body=b"x", index=1, term=1, pos=0, channel=1)
    assert a != DLedgerEntry(body=b"x", index=1, term=1, pos=48)
    assert DLedgerEntry(body=b"") != DLedgerEntry(body=b"\x00")


@given(body=st.binary(max_size=4096), index=st.integers(0, MAX_INDEX), term=st.integers(0, MAX_TERM),
       pos=st.integers(0, 2**63 - 1), magic=st.sampled_from([1, 2, 3]),
       channel=st.integers(-2**31, 2**31 - 1), chain=st.integers(0, 2**32 - 1))
def test_encode_decode_round_trip(body, index, term, pos, magic, channel, chain):
    """Every record with an index and a term in the format's bounds decodes to itself (values
    beyond them are refused: tests/store/test_bounds.py)."""
    entry = DLedgerEntry(body=body, magic=magic, index=index, term=term, pos=pos, channel=channel,
                         chain_crc=chain)
    data = encode(entry)
    assert len(data) == BODY_OFFSET + len(body)
    back = decode(data)
    assert back == entry
    assert (back.body_crc, back.chain_crc, back.size) == (entry.body_crc, chain, len(data))
    buf = bytearray(len(data) + 10)
    assert encode_into(buf, 10, DLedgerEntry(body=body, magic=magic, index=index, term=term, pos=pos,
                                             channel=channel, chain_crc=chain)) == len(data)
    assert bytes(buf[10:]) == data


@given(st.binary(max_size=70_000))
def test_our_crc_is_crcmods_crc32(body):
    assert crc32(body) == REFERENCE_CRC(body) == zlib.crc32(body)
    entry = DLedgerEntry(body=body)
    encode(entry)
    assert entry.body_crc == REFERENCE_CRC(body)


@given(st.binary(min_size=1, max_size=512), st.data())
def test_any_flipped_body_bit_is_caught_by_the_crc(body, data):
    raw = bytearray(encode(DLedgerEntry(body=body, index=1, term=1, pos=0)))
    bit = data.draw(st.integers(0, len(body) * 8 - 1))
    raw[BODY_OFFSET + bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptEntryError, match="CRC"):
        decode(raw)
    assert decode(raw, check_crc=False).index == 1


@given(st.binary(max_size=200))
def test_decoding_arbitrary_bytes_either_succeeds_consistently_or_raises_a_clear_error(junk):
    try:
        entry = decode(junk)
    except CorruptEntryError:
        return
    assert entry.size == len(junk[:entry.size]) and entry.size >= BODY_OFFSET
    assert entry.magic in (1, 2, 3)


def test_a_huge_size_field_is_rejected_without_reading_or_allocating():
    raw = bytearray(encode(DLedgerEntry(body=b"abc", index=0, term=0, pos=0)))
    struct.pack_into(">i", raw, 4, 2**31 - 1)
    with pytest.raises(CorruptEntryError, match="inconsistent sizes"):
        decode(raw)
    struct.pack_into(">i", raw, 44, 2**31 - 1 - BODY_OFFSET)
    with pytest.raises(CorruptEntryError, match="runs past the end"):
        decode(raw)


def test_a_body_size_that_disagrees_with_size_is_rejected():
    raw = bytearray(encode(DLedgerEntry(body=b"abcdef", index=0, term=0, pos=0)))
    struct.pack_into(">i", raw, 44, 2**31 - 1)
    with pytest.raises(CorruptEntryError):
        decode(raw)


def test_bad_magic_and_short_header_are_rejected_with_the_offset():
    raw = bytearray(encode(DLedgerEntry(body=b"z", index=0, term=0, pos=0)))
    raw[3] = 9
    with pytest.raises(CorruptEntryError, match="invalid magic 9"):
        decode(raw)
    with pytest.raises(CorruptEntryError, match="truncated"):
        decode_header(raw[:20])
    with pytest.raises(CorruptEntryError, match="offset 4"):
        decode(bytes(4) + bytes(raw), 4, path="seg")


def test_noop_entries_round_trip_with_their_magic():
    entry = decode(encode(DLedgerEntry(magic=MAGIC_NOOP, index=3, term=2, pos=0)))
    assert entry.magic == MAGIC_NOOP and entry.body == b"" and entry.entry_type.name == "NOOP"
    assert DLedgerEntry().magic == MAGIC_NORMAL


# ---------------------------------------------------------------------------------------------
# the format rules every reader shares
# ---------------------------------------------------------------------------------------------
def test_decode_header_names_its_fields():
    h = decode_header(HELLO_JAVA)
    assert isinstance(h, RecordHeader)
    assert (h.magic, h.size, h.index, h.term, h.pos, h.body_crc, h.body_size) == (1, 53, 0, 1, 0, 0, 5)


@pytest.mark.parametrize("unit_magic, magic, ok", [
    (MAGIC_NORMAL, MAGIC_NORMAL, True),
    (MAGIC_NOOP, MAGIC_NOOP, True),
    (MAGIC_NORMAL, MAGIC_NOOP, True),       # Java leaders write magic 1 into every unit
    (MAGIC_NOOP, MAGIC_NORMAL, False),
])
def test_a_record_matches_its_unit_with_javas_noop_magic(unit_magic, magic, ok):
    unit = IndexUnit(unit_magic, 100, 60, 7, 2)
    assert matches_unit(unit, magic, 60, 7, 2, 100, 0x1234) is ok
    assert bool(magic_matches_unit(unit_magic, magic)) is ok


def test_the_scalar_and_column_forms_of_the_magic_rule_agree():
    magics = (MAGIC_NORMAL, MAGIC_NOOP, 3)
    for um in magics:
        for m in magics:
            unit = IndexUnit(um, 0, 60, 1, 1)
            assert matches_unit(unit, m, 60, 1, 1, 0, 0) == bool(magic_matches_unit(um, m))


def test_matches_unit_compares_pos_only_for_records_with_a_crc():
    unit = IndexUnit(MAGIC_NORMAL, 100, 60, 7, 2)
    assert not matches_unit(unit, MAGIC_NORMAL, 60, 7, 2, 999, 0x1234)
    assert matches_unit(unit, MAGIC_NORMAL, 60, 7, 2, 999, 0)   # Java's record: another node's pos
    assert not matches_unit(unit, MAGIC_NORMAL, 61, 7, 2, 100, 0)
    assert not matches_unit(unit, MAGIC_NORMAL, 60, 8, 2, 100, 0)
    assert not matches_unit(unit, MAGIC_NORMAL, 60, 7, 3, 100, 0)


def test_segment_walk_skips_padding_and_stops_at_the_data_end():
    rec = encode(DLedgerEntry(body=b"abc", index=4, term=1, pos=16))
    seg = bytearray(encode_blank(16) + rec + bytes(16) + bytes(200))
    seg[-40:] = encode_blank(40)                         # a tail blank to the end
    items = list(iter_segment_records(seg, 0, len(seg)))
    assert [(i.offset, i.header.index if i.header else None, i.error) for i in items] == \
        [(16, 4, None), (16 + len(rec), None, None)]     # the record, then the zero header


def test_segment_walk_reports_a_misplaced_blank_and_a_bad_header():
    rec = encode(DLedgerEntry(body=b"abc", index=4, term=1, pos=0))
    seg = rec + encode_blank(16) + bytes(64)
    *_, last = iter_segment_records(seg, 0, len(seg))
    assert last.offset == len(rec) and "blank" in last.error
    bad = b"\x00\x00\x00\x09" + rec[4:] + bytes(64)
    (only,) = iter_segment_records(bad, 0, len(bad), path="seg", base=1000)
    assert only.header is None and "invalid magic 9" in only.error and "seg" in only.error


def test_a_full_segment_walks_to_its_end():
    rec = encode(DLedgerEntry(body=b"abc", index=0, term=1, pos=0))
    seg = rec + encode_blank(64)
    assert [i.offset for i in iter_segment_records(seg, 0, len(seg))] == [0]


def test_segment_names_are_twenty_digits():
    assert segment_name(1073741824) == "00000000001073741824"
    assert is_segment_name(segment_name(0))
    assert not is_segment_name("123")
    assert not is_segment_name("0000000000000000000a")
    assert not is_segment_name("000000000000000000000")
    assert not is_segment_name("00000000000000000000.tmp")
