"""MmapFileList: Java DLedger's MmapFileListTest / DefaultMmapFileTest scenarios and layout checks."""

import os
import struct

import pytest

from dledger.entry import MAGIC_BLANK
from dledger.errors import DLedgerError, StoreLayoutError
from dledger.store import MmapFileList


def make_list(tmp_path, size, name="list"):
    lst = MmapFileList(str(tmp_path / name), size)
    lst.load()
    return lst


def test_ten_504_byte_records_in_512_byte_files_take_ten_files_then_truncate_reset_and_reload(tmp_path):
    lst = make_list(tmp_path, 512)
    for _ in range(10):
        lst.append(bytes(504))
    assert len(lst.files) == 10
    assert lst.min_offset() == 0 and lst.max_wrote_position() == 5112
    # each full file ends with an 8-byte blank
    assert struct.unpack_from(">ii", lst.files[0].mm, 504) == (MAGIC_BLANK, 8)

    lst.truncate_offset(1536)
    assert len(lst.files) == 4 and lst.max_wrote_position() == 1536

    lst.reset_offset(1024)
    assert len(lst.files) == 2 and lst.min_offset() == 1024 and lst.max_wrote_position() == 1536
    lst.close()

    again = make_list(tmp_path, 512)
    assert len(again.files) == 2 and again.min_offset() == 1024
    assert again.max_wrote_position() == 2048  # loaded files count as full until recovery
    again.truncate_offset(-1)
    assert again.files == [] and again.min_offset() == 0 and again.max_wrote_position() == 0
    assert os.listdir(tmp_path / "list") == []


def test_flush_waits_for_a_whole_page_unless_asked_for_everything_and_a_full_file_always_flushes(tmp_path):
    lst = make_list(tmp_path, 4096 + 2 + 8)
    lst.append(bytes(4095))
    lst.flush(1)
    assert lst.flushed_where == 0
    lst.append(bytes(1))
    lst.flush(1)
    assert lst.flushed_where == 4096
    lst.append(bytes(1))
    lst.flush(0)
    assert lst.flushed_where == 4097
    pos = lst.append(bytes(2))  # 2 + 8 > 9 bytes left: blank fills the file, a new one starts
    assert pos == 4106 and len(lst.files) == 2
    lst.flush(1)
    assert lst.flushed_where == 4106


def test_pre_append_reports_the_next_file_when_the_record_and_a_blank_do_not_fit(tmp_path):
    lst = make_list(tmp_path, 256)
    assert lst.pre_append(200) == 0
    lst.append(bytes(200))
    assert lst.pre_append(48) == 200  # 48 + 8 == 56 left: fits exactly
    assert lst.pre_append(49) == 256  # 49 + 8 > 56 left -> blank, new file
    assert lst.pre_append(40) == 256  # already rolled
    assert struct.unpack_from(">ii", lst.files[0].mm, 200) == (MAGIC_BLANK, 56)


def test_index_lists_append_without_blanks_and_fill_files_exactly(tmp_path):
    lst = make_list(tmp_path, 64)
    positions = [lst.append(bytes(32), use_blank=False) for _ in range(5)]
    assert positions == [0, 32, 64, 96, 128]
    assert len(lst.files) == 3


def test_a_record_larger_than_a_file_is_refused(tmp_path):
    lst = make_list(tmp_path, 128)
    with pytest.raises(DLedgerError, match="cannot fit"):
        lst.append(bytes(121))
    assert lst.append(bytes(120)) == 0


def test_reset_offset_inside_a_file_writes_a_head_blank_that_survives_reload(tmp_path):
    lst = make_list(tmp_path, 1024)
    for _ in range(3):
        lst.append(bytes(500))
    lst.reset_offset(1024 + 300)
    assert len(lst.files) == 1
    first = lst.files[0]
    assert first.start_position == 300 and lst.min_offset() == 1324
    assert struct.unpack_from(">ii", first.mm, 0) == (MAGIC_BLANK, 300)
    lst.close()
    again = make_list(tmp_path, 1024)
    assert again.min_offset() == 1324


def test_rebuild_with_pos_starts_an_empty_list_at_that_position(tmp_path):
    lst = make_list(tmp_path, 1024)
    lst.append(bytes(100))
    lst.rebuild_with_pos(5000)
    assert lst.min_offset() == lst.max_wrote_position() == 5000
    assert [f.file_from_offset for f in lst.files] == [4096]
    assert lst.append(bytes(10)) == 5000


def test_get_data_refuses_reads_beyond_what_was_written(tmp_path):
    lst = make_list(tmp_path, 1024)
    pos = lst.append(b"abcdef")
    assert lst.get_data(pos, 6) == b"abcdef"
    assert lst.get_data(pos, 7) is None
    assert lst.get_data(5000, 1) is None


def test_file_positions_round_trip_and_a_new_file_is_pre_sized(tmp_path):
    lst = make_list(tmp_path, 4096)
    lst.append(b"x" * 10)
    f = lst.files[0]
    assert os.path.getsize(f.path) == 4096 and f.file_name == "0" * 20
    f.set_positions(7)
    assert (f.wrote_position, f.committed_position) == (7, 7)
    assert os.stat(f.path).st_blocks * 512 >= 4096  # allocated, not a sparse hole


def test_an_all_blank_first_file_is_removed(tmp_path):
    lst = make_list(tmp_path, 512)
    lst.append(bytes(504))
    lst.append(bytes(10))
    lst.reset_offset(504)  # head blank over the only record; tail blank already there
    assert lst.check_first_file_all_blank()
    assert [f.file_from_offset for f in lst.files] == [512]


@pytest.mark.parametrize("name,content,message", [
    ("garbage", b"", "unexpected file"),
    ("00000000000000000000.bak", b"", "unexpected file"),
    ("00000000000000000000", bytes(100), "has 100 bytes, expected 512"),
    ("00000000000000000100", bytes(512), "not a multiple"),
])
def test_load_refuses_foreign_or_malformed_files_naming_them(tmp_path, name, content, message):
    d = tmp_path / "list"
    d.mkdir()
    (d / name).write_bytes(content)
    with pytest.raises(StoreLayoutError, match=message) as err:
        MmapFileList(str(d), 512).load()
    assert name in str(err.value)


def test_load_refuses_a_gap_between_segments_naming_the_file(tmp_path):
    d = tmp_path / "list"
    d.mkdir()
    (d / f"{0:020d}").write_bytes(bytes(512))
    (d / f"{1024:020d}").write_bytes(bytes(512))
    with pytest.raises(StoreLayoutError, match="gap") as err:
        MmapFileList(str(d), 512).load()
    assert f"{1024:020d}" in str(err.value)
