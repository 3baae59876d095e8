"""The `dledger` command: read-file and verify on real store directories."""

import os

from dledger.cli import main
from dledger.store import DLedgerMmapFileStore


def make_store(tmp_path, n=5):
    node = str(tmp_path / "dledger-n0")
    store = DLedgerMmapFileStore.open(node, data_file_size=4096, index_file_size=320)
    store.batch_append_as_leader([f"body-{i}".encode() for i in range(n)])
    store.close()
    return node


def test_read_file_prints_every_entry(tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["read-file", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# ") and "end 4" in out[0]
    assert len(out) == 6 and out[3].startswith("2\tterm=0") and "b'body-2'" in out[3]
    assert node


def test_verify_passes_a_sound_store_and_names_a_damaged_entry(tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["verify", node]) == 0
    assert "5 entries checked, 0 corrupt" in capsys.readouterr().out
    seg = os.path.join(node, "data", "0" * 20)
    with open(seg, "r+b") as fh:  # flip a bit in the body of entry 1 (records are 54 bytes)
        fh.seek(54 + 50)
        b = fh.read(1)
        fh.seek(54 + 50)
        fh.write(bytes([b[0] ^ 1]))
    assert main(["verify", node]) == 1
    out = capsys.readouterr().out
    assert "entry 1 is corrupt" in out and seg in out and "1 corrupt" in out
