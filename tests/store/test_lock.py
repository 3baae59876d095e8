"""One writer per store directory (``dledger.store.lock``).

A writable open locks ``<dir>/lock`` (``flock``) and writes its pid and host name into it; a
second writable open, in this process or in another one, fails with ``StoreLockedError`` naming
the holder; read-only opens never lock; ``close``, a crash of the holder and the death of the
holding process release the lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from dledger.errors import DLedgerError, StoreLockedError
from dledger.sim.disk import crash_store
from dledger.store import open_store
from helpers.small_store import append_bodies, body, open_small, snapshot

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _holder_script(d: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.abspath(SRC)!r})
        from dledger.store import DLedgerMmapFileStore
        s = DLedgerMmapFileStore.open({d!r}, data_file_size=1024, index_file_size=2048)
        print("locked", flush=True)
        sys.stdin.readline()
        s.close()
    """)


def test_a_second_writable_open_in_this_process_fails_naming_the_holder(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    try:
        with pytest.raises(StoreLockedError) as info:
            open_small(d)
        assert isinstance(info.value, DLedgerError)
        assert f"pid={os.getpid()}" in str(info.value) and d in str(info.value)
        assert info.value.holder.startswith(f"pid={os.getpid()} host=")
        # the holder keeps working
        append_bodies(s, [body(1)])
    finally:
        s.close()


def test_read_only_opens_never_lock_and_see_the_writers_log(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    try:
        append_bodies(s, [body(i) for i in range(3)])
        s.flush()
        with open_store(d, data_file_size=1024, index_file_size=2048) as ro:
            assert len(snapshot(ro)) == 3
        with open_store(d, data_file_size=1024, index_file_size=2048) as ro2:
            assert len(snapshot(ro2)) == 3
    finally:
        s.close()


def test_close_and_a_crash_release_the_lock(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.close()
    s = open_small(d)            # after close
    append_bodies(s, [body(1)])
    crash_store(s)               # the holder dies without close
    s = open_small(d)
    try:
        assert len(snapshot(s)) == 1
    finally:
        s.close()


def test_a_refused_open_holds_no_lock(tmp_path):
    d = str(tmp_path / "s")
    open_small(d).close()
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    with open(os.path.join(d, "data", "not-a-segment"), "wb") as fh:
        fh.write(b"x")
    with pytest.raises(DLedgerError):
        open_small(d)
    os.unlink(os.path.join(d, "data", "not-a-segment"))
    open_small(d).close()


def test_another_process_cannot_open_a_locked_store_and_its_death_releases_it(tmp_path):
    d = str(tmp_path / "s")
    open_small(d).close()
    proc = subprocess.Popen([sys.executable, "-c", _holder_script(d)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError) as info:
            open_small(d)
        assert f"pid={proc.pid}" in str(info.value)
        with open_small(d, read_only=True) as ro:  # read-only: fine
            assert ro.ledger_end_index == -1
    finally:
        proc.kill()                 # dies holding the lock: the kernel releases it
        proc.wait()
    s = open_small(d)
    s.close()


def test_this_process_cannot_open_a_store_another_process_holds_until_it_closes(tmp_path):
    d = str(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-c", _holder_script(d)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError):
            open_small(d)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait() == 0
    finally:
        proc.kill()
        proc.wait()
    open_small(d).close()
