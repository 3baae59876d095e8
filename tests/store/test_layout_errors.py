"""Store directories that are not laid out as expected (another group's or format's directory; missing segments, wrong sizes, stray names).

Wrong segment sizes, gaps between segments, names that are not 20-digit offsets, offsets that
are not multiples of the segment size, directories in place of segments (or files in place of
directories), and a directory written with another segment size: the open refuses with
``StoreLayoutError`` naming the offending path, and changes nothing on disk.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from dledger.errors import StoreLayoutError
from dledger.store import open_store
from helpers.small_store import DATA_FILE_SIZE, INDEX_FILE_SIZE, append_bodies, body, open_small
from helpers.store_files import segments


def build(d, n=40):
    """A store with three data segments and two index segments."""
    s = open_small(d, index_file_size=32 * 16)
    s.persist_term(1, None)
    append_bodies(s, [body(i, 32) for i in range(n)])
    s.close()
    assert len(segments(d, "data")) == 4 and len(segments(d, "index")) == 3


def fingerprint(d):
    """Every path under ``d`` with the hash of its content."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs:
            out[os.path.join(root, name)] = "dir"
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as fh:
                out[p] = hashlib.sha256(fh.read()).hexdigest()
    return out


def refuses(d, offender, **kw):
    before = fingerprint(d)
    kw.setdefault("index_file_size", 32 * 16)
    with pytest.raises(StoreLayoutError) as info:
        open_small(d, **kw)
    assert offender in str(info.value)
    assert fingerprint(d) == before, "a refused open must not change the directory"
    return info.value


def resize(path, size):
    with open(path, "r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize("kind", ["data", "index"])
@pytest.mark.parametrize("which", [0, 1, -1])
@pytest.mark.parametrize("delta", [-1, +1, "half", "empty"])
def test_wrong_segment_size(tmp_path, kind, which, delta):
    d = str(tmp_path / "s")
    build(d)
    victim = segments(d, kind)[which]
    size = os.path.getsize(victim)
    new = {"half": size // 2, "empty": 0}.get(delta, size + delta if isinstance(delta, int) else 0)
    resize(victim, new)
    err = refuses(d, victim)
    assert str(new) in str(err)


@pytest.mark.parametrize("kind", ["data", "index"])
def test_gap_in_segment_names(tmp_path, kind):
    d = str(tmp_path / "s")
    build(d)
    segs = segments(d, kind)
    os.unlink(segs[1])
    refuses(d, segs[2])


@pytest.mark.parametrize("kind", ["data", "index"])
@pytest.mark.parametrize("name", [
    "garbage",
    "0000000000000000000a",
    "0000000000000000000",      # 19 digits
    "000000000000000000000",    # 21 digits
    "00000000000000000000.tmp",
    ".00000000000000000000.swp",
    "-0000000000000000001",
])
def test_garbage_file_names(tmp_path, kind, name):
    d = str(tmp_path / "s")
    build(d)
    path = os.path.join(d, kind, name)
    with open(path, "wb") as fh:
        fh.write(b"x")
    refuses(d, path)


@pytest.mark.parametrize("kind", ["data", "index"])
def test_offset_not_a_multiple_of_the_segment_size(tmp_path, kind):
    d = str(tmp_path / "s")
    build(d)
    last = segments(d, kind)[-1]
    size = os.path.getsize(last)
    odd = os.path.join(d, kind, f"{int(os.path.basename(last)) + size + 8:020d}")
    with open(odd, "wb") as fh:
        fh.truncate(size)
    refuses(d, odd)


@pytest.mark.parametrize("kind", ["data", "index"])
def test_directory_in_place_of_a_segment(tmp_path, kind):
    d = str(tmp_path / "s")
    build(d)
    last = segments(d, kind)[-1]
    size = os.path.getsize(last)
    sub = os.path.join(d, kind, f"{int(os.path.basename(last)) + size:020d}")
    os.mkdir(sub)
    refuses(d, sub)


@pytest.mark.parametrize("kind", ["data", "index"])
def test_file_in_place_of_the_segment_directory(tmp_path, kind):
    d = str(tmp_path / "s")
    os.makedirs(d)
    with open(os.path.join(d, kind), "wb") as fh:
        fh.write(b"not a directory")
    refuses(d, os.path.join(d, kind))


def test_store_written_with_another_segment_size(tmp_path):
    """A directory of another configuration (here: 2 KiB data segments) is refused, not rewritten."""
    d = str(tmp_path / "s")
    s = open_small(d, data_file_size=2 * DATA_FILE_SIZE)
    s.persist_term(1, None)
    append_bodies(s, [body(i, 32) for i in range(5)])
    s.close()
    refuses(d, segments(d, "data")[0], index_file_size=INDEX_FILE_SIZE)
    # the offline reader takes the sizes from the files and reads it
    with open_store(d) as r:
        assert [e.body for e in r.iter_entries()] == [body(i, 32) for i in range(5)]


def test_segment_sizes_that_differ_within_a_list_are_refused_offline(tmp_path):
    d = str(tmp_path / "s")
    build(d)
    victim = segments(d, "data")[2]
    resize(victim, DATA_FILE_SIZE * 2)
    with pytest.raises(StoreLayoutError) as info:
        open_store(d)
    assert victim in str(info.value)


def test_not_a_store_directory_offline(tmp_path):
    d = tmp_path / "elsewhere"
    (d / "stuff").mkdir(parents=True)
    with pytest.raises(StoreLayoutError) as info:
        open_store(str(d))
    assert str(d) in str(info.value)
