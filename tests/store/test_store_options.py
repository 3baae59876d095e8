"""StoreOptions: the file store's settings as one record, built once from a node's config."""

import dataclasses

import pytest

from dledger.config import DLedgerConfig
from dledger.server import open_store_for
from dledger.store import FSYNC, PAGE_CACHE, DLedgerMmapFileStore, StoreOptions


def _config(tmp_path, **kw):
    return DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1", store_base_dir=str(tmp_path), **kw)


def test_from_config_takes_every_store_setting_of_the_config(tmp_path):
    c = _config(tmp_path, durability="fsync", mapped_file_size_for_entry_data=1 << 20,
                mapped_file_size_for_entry_index=32 * 1024, file_reserved_hours=5, delete_when="01;13",
                disk_space_ratio_to_check_expired=0.5, disk_space_ratio_to_force_clean=0.6,
                enable_disk_force_clean=False, flush_file_interval=7)
    o = StoreOptions.from_config(c, background_flush=True, checkpoint_interval_ms=250)
    assert o == StoreOptions(data_file_size=1 << 20, index_file_size=32 * 1024, durability=FSYNC,
                             file_reserved_hours=5, delete_when="01;13",
                             disk_space_ratio_to_check_expired=0.5, disk_space_ratio_to_force_clean=0.6,
                             enable_disk_force_clean=False, flush_interval_ms=7, checkpoint_interval_ms=250,
                             background_flush=True)
    assert o.delete_hours == {1, 13} and o.disk_full_ratio == pytest.approx(0.65)


def test_the_server_opens_its_file_store_with_the_options_of_its_config(tmp_path):
    c = _config(tmp_path, mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 * 1024,
                file_reserved_hours=5, flush_file_interval=7)
    with open_store_for(c) as store:
        assert store.options == StoreOptions.from_config(c)
        assert store.data_list.mapped_file_size == 1 << 20 and store.index_list.mapped_file_size == 32 * 1024
        assert store.file_reserved_hours == 5 and store.flush_interval_ms == 7
        assert store.durability is PAGE_CACHE


def test_options_and_keywords_build_the_same_store(tmp_path):
    o = StoreOptions(data_file_size=1 << 16, index_file_size=32 * 64, max_entry_size=1 << 20)
    a = DLedgerMmapFileStore(str(tmp_path / "a"), o)
    b = DLedgerMmapFileStore(str(tmp_path / "b"), data_file_size=1 << 16, index_file_size=32 * 64,
                             max_entry_size=1 << 20)
    assert a.options == b.options == o
    assert a.max_entry_size == b.max_entry_size == (1 << 16) - 8       # a segment holds it


@pytest.mark.parametrize("bad, names", [
    ({"durability": "sometimes"}, "durability"),
    ({"index_file_size": 33}, "index_file_size"),
    ({"max_entry_size": 3}, "max_entry_size"),
    ({"delete_when": "4am"}, "delete_when"),
    ({"delete_when": 4}, "delete_when"),
])
def test_a_bad_setting_is_refused_naming_it(bad, names):
    with pytest.raises(ValueError, match=names):
        StoreOptions(**bad)
    with pytest.raises(ValueError, match=names):
        StoreOptions().with_(**bad)


def test_options_are_frozen_and_never_given_twice(tmp_path):
    o = StoreOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.read_only = True
    with pytest.raises(TypeError, match="not both"):
        DLedgerMmapFileStore(str(tmp_path), o, read_only=True)
    with pytest.raises(TypeError, match="StoreOptions"):
        DLedgerMmapFileStore(str(tmp_path), {"read_only": True})
    with pytest.raises(TypeError, match="no_such_setting"):
        DLedgerMmapFileStore(str(tmp_path), no_such_setting=1)
