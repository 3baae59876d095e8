import pytest

from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore


@pytest.fixture
def open_file_store(tmp_path):
    """Open (or reopen) a file store in tmp_path/dledger-n0 with small segments by default."""
    opened = []

    def _open(name="dledger-n0", data_file_size=10 * 1024 * 1024, index_file_size=32 * 1024, **kw):
        store = DLedgerMmapFileStore.open(str(tmp_path / name), data_file_size=data_file_size,
                                          index_file_size=index_file_size, **kw)
        opened.append(store)
        return store

    yield _open
    for s in opened:
        try:
            s.close()
        except Exception:
            pass


@pytest.fixture(params=["file", "memory"])
def any_store(request, open_file_store):
    """Both stores, for behaviour they must share. Small segments force roll-overs."""
    def _make(data_file_size=4096):
        if request.param == "file":
            return open_file_store(data_file_size=data_file_size, index_file_size=320)
        return DLedgerMemoryStore(data_file_size=data_file_size)
    return _make
