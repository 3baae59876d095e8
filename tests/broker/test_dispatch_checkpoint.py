"""The dispatch checkpoint's file: round trips, damage is no checkpoint (never a wrong one), the
earlier one-line format still reads, and a write is synced before it replaces the old file."""

import os

from hypothesis import given, strategies as st

from dledger.broker import dispatch_checkpoint as dc

topics = st.text(min_size=1, max_size=12)
checkpoints = st.builds(dc.DispatchCheckpoint, st.integers(0, 2**62), st.integers(0, 2**62),
                        st.dictionaries(st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(0, 10**9),
                                        max_size=5),
                        st.dictionaries(st.text(min_size=1, max_size=20), st.integers(0, 10**9), max_size=3))


@given(checkpoints)
def test_a_checkpoint_round_trips(cp):
    assert dc.parse(cp.text()) == cp


@given(checkpoints, st.data())
def test_a_torn_or_damaged_checkpoint_is_none_never_a_different_one(cp, data):
    text = cp.text()
    if data.draw(st.booleans()):
        damaged = text[:data.draw(st.integers(0, len(text) - 1))]             # torn
    else:
        k = data.draw(st.integers(0, len(text) - 1))
        damaged = text[:k] + chr((ord(text[k]) + data.draw(st.integers(1, 50))) % 0x10000) + text[k + 1:]
    got = dc.parse(damaged)
    assert got == cp or (got.problem is not None and got.queues is None and got.next_index == 0)


def test_the_earlier_one_line_format_reads_without_counts(tmp_path):
    (tmp_path / dc.NAME).write_text("12 4096\n")
    cp = dc.read(str(tmp_path))
    assert (cp.next_index, cp.next_physical_offset, cp.queues, cp.problem) == (12, 4096, None, None)
    assert dc.read(str(tmp_path / "missing-dir")).problem == "there is none"


def test_a_write_syncs_the_new_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                  real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", b)), real_replace(a, b)))
    cp = dc.DispatchCheckpoint(3, 300, {("T", 0): 2}, {"20261126000000000": 5})
    dc.write(str(tmp_path), cp)
    path = str(tmp_path / dc.NAME)
    assert calls == [("fsync", path + ".tmp"), ("replace", path), ("fsync", str(tmp_path))]
    assert dc.read(str(tmp_path)) == cp
