"""FileSnapshotStore: the snapshots of one node, as files under ``<store_dir>/snapshot``.

The layout is Java DLedger's, so either can read the other's snapshots:

    <store_dir>/snapshot/
        snapshot_<lastIncludedIndex>/snapshot_meta   JSON (``meta.py``)
        snapshot_<lastIncludedIndex>/data            whatever the state machine wrote
        tmp/                                         a snapshot being taken (removed on open)
        install_tmp/                                 a snapshot being received from the leader

Taking a snapshot (``begin_save``): the state machine writes the ``data`` file of ``tmp/``
through a ``SnapshotWriter`` (file-like, streamed: the state is never held whole); ``commit``
then fsyncs the data, writes the meta (its size and CRC-32 included) and fsyncs it, fsyncs
``tmp/``, renames it to ``snapshot_<index>`` and fsyncs the parent. A crash at any point leaves
either the older snapshots alone or the new one whole: a ``snapshot_<index>`` directory only
ever appears complete and durable. ``abort`` (or a crash) leaves ``tmp/``, which the next open
removes. After a commit, snapshots beyond ``max_reserve`` are removed, oldest first.

Reading (``newest``): the snapshot with the highest index whose meta parses, names the index its
directory does, and whose data has the size and CRC its meta records; a damaged one is removed
with one log line naming what is wrong and the one used instead, and the next older one is tried.
``open_reader`` gives a ``SnapshotReader`` (file-like, streamed) over a snapshot's data.

Receiving (``begin_install``): chunks are appended to ``install_tmp/data`` at the offset the
receiver reports (``received``), each fsynced before it is acknowledged, so a broken connection
(or a restart) resumes where the durable bytes end; ``finish`` checks size and CRC against the
leader's meta and moves it into place as a snapshot of its own. A chunk at another offset is
refused (``InstallOffsetError``, naming the offset expected), so the sender can resume there.

Every path of the store names the file it concerns in its errors; an ``OSError`` from the disk
is raised as it is (the caller decides: a failed snapshot is retried later, the log still holds
the entries).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterator

from dledger.entry import crc32
from dledger.errors import CorruptSnapshotError
from dledger.snapshot.meta import META_FILE_NAME, SnapshotMeta
from dledger.store.mmap_file import fsync_dir

log = logging.getLogger(__name__)

SNAPSHOT_DIR_NAME = "snapshot"
DATA_FILE_NAME = "data"
TMP_DIR_NAME = "tmp"
INSTALL_TMP_DIR_NAME = "install_tmp"
DIR_PREFIX = "snapshot_"
#: the install target's meta, kept beside the partial data so that a restart resumes it
INSTALL_TARGET_FILE_NAME = "install_target"
_DIR_RE = re.compile(r"^snapshot_(-?\d+)$")
CHUNK = 1 << 20


class InstallOffsetError(ValueError):
    """A chunk of an install does not start where the received bytes end (``expected``)."""

    def __init__(self, message: str, expected: int) -> None:
        super().__init__(message)
        self.expected = expected


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_file_durably(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def file_crc(path: str, size: int | None = None) -> tuple[int, int]:
    """(size, CRC-32) of the file at ``path``, read in 1 MiB chunks."""
    crc = n = 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            k = f.readinto(buf)
            if not k:
                break
            crc = crc32(view[:k], crc)
            n += k
    return n, crc


class SnapshotWriter:
    """A binary file-like object over the data file of a snapshot being taken: ``write``
    (bytes-like, any size), ``flush``, ``tell``. It counts the size and the CRC as it goes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "wb", buffering=CHUNK)
        self.size = 0
        self.crc = 0

    def write(self, data) -> int:
        if self._f.closed:
            raise ValueError("the snapshot was committed or aborted: its writer is closed")
        n = self._f.write(data)
        self.crc = crc32(data, self.crc)
        self.size += n
        return n

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()

    @property
    def closed(self) -> bool:
        return self._f.closed

    def _finish(self) -> None:
        """Flush and fsync the data file, then close it."""
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()

    def _discard(self) -> None:
        if not self._f.closed:
            self._f.close()


class SnapshotReader:
    """A binary file-like object over a snapshot's data: ``read``, ``readinto``, ``meta``."""

    def __init__(self, path: str, meta: SnapshotMeta) -> None:
        self.path = path
        self.meta = meta
        self._f = open(path, "rb", buffering=CHUNK)

    def read(self, size: int = -1) -> bytes:
        return self._f.read(size)

    def readinto(self, buf) -> int:
        return self._f.readinto(buf)

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()

    @property
    def closed(self) -> bool:
        return self._f.closed

    def __enter__(self) -> "SnapshotReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PendingSnapshot:
    """A snapshot being taken: the state machine writes ``writer``; then ``commit`` or ``abort``."""

    def __init__(self, store: "FileSnapshotStore", index: int, term: int) -> None:
        self.store = store
        self.index = index
        self.term = term
        self.dir = os.path.join(store.base, TMP_DIR_NAME)
        self.writer = SnapshotWriter(os.path.join(self.dir, DATA_FILE_NAME))

    def commit(self) -> SnapshotMeta:
        """Make the snapshot durable and visible (see the module docstring); returns its meta.
        A snapshot of that index that exists already is kept and this one dropped."""
        w = self.writer
        w._finish()
        meta = SnapshotMeta(self.index, self.term, w.size, w.crc)
        _write_file_durably(os.path.join(self.dir, META_FILE_NAME), meta.encode())
        fsync_dir(self.dir)
        final = self.store.path_of(self.index)
        if os.path.exists(final):
            shutil.rmtree(self.dir, ignore_errors=True)
            return self.store.read_meta(self.index)
        os.rename(self.dir, final)
        fsync_dir(self.store.base)
        self.store.prune()
        return meta

    def abort(self) -> None:
        self.writer._discard()
        shutil.rmtree(self.dir, ignore_errors=True)


class InstallTarget:
    """A snapshot being received: ``received`` bytes of it are durable in ``install_tmp``."""

    def __init__(self, store: "FileSnapshotStore", meta: SnapshotMeta) -> None:
        self.store = store
        self.meta = meta
        self.dir = os.path.join(store.base, INSTALL_TMP_DIR_NAME)
        self.data_path = os.path.join(self.dir, DATA_FILE_NAME)
        self.received = os.path.getsize(self.data_path) if os.path.exists(self.data_path) else 0

    def write_chunk(self, offset: int, data, chunk_crc: int | None = None) -> int:
        """Append ``data`` at ``offset`` (it must be ``received``), durably; returns the new
        ``received``. ``chunk_crc``, when given, must be the CRC-32 of ``data``."""
        if offset != self.received:
            raise InstallOffsetError(f"install chunk at offset {offset}, but {self.received} bytes of "
                                     f"{self.meta} are received", self.received)
        if chunk_crc is not None and crc32(data) != chunk_crc:
            raise CorruptSnapshotError(f"install chunk at offset {offset} fails its CRC", path=self.data_path)
        size = self.meta.data_size
        if size is not None and offset + len(data) > size:
            raise CorruptSnapshotError(f"install chunk at offset {offset} of {len(data)} bytes goes beyond "
                                       f"the snapshot's {size} bytes", path=self.data_path)
        fd = os.open(self.data_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.received += len(data)
        return self.received

    @property
    def complete(self) -> bool:
        return self.meta.data_size is not None and self.received == self.meta.data_size

    def verify(self) -> tuple[int, int]:
        """Check the whole data against the meta; returns its (size, CRC-32). A mismatch
        discards what was received (the install starts again from 0) and raises
        ``CorruptSnapshotError``."""
        meta = self.meta
        size, crc = file_crc(self.data_path) if os.path.exists(self.data_path) else (0, 0)
        if meta.checked and (size, crc) != (meta.data_size, meta.data_crc):
            self.discard()
            raise CorruptSnapshotError(f"received {meta} has {size} bytes, CRC {crc:#010x}; the leader's has "
                                       f"{meta.data_size} bytes, CRC {meta.data_crc:#010x}",
                                       path=self.data_path)
        return size, crc

    def finish(self, *, verified: bool = False) -> SnapshotMeta:
        """Check the whole data against the meta (``verify``; skipped when ``verified``: a
        ``verify`` just passed) and move it into place; returns the meta."""
        meta = self.meta
        if verified and meta.checked:
            size, crc = meta.data_size, meta.data_crc
        else:
            size, crc = self.verify()
        final_meta = SnapshotMeta(meta.last_included_index, meta.last_included_term, size, crc)
        _write_file_durably(os.path.join(self.dir, META_FILE_NAME), final_meta.encode())
        target = os.path.join(self.dir, INSTALL_TARGET_FILE_NAME)
        os.unlink(target)
        fsync_dir(self.dir)
        final = self.store.path_of(meta.last_included_index)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(self.dir, final)
        fsync_dir(self.store.base)
        self.store.prune()
        return final_meta

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.received = 0


class FileSnapshotStore:
    """The snapshots under ``<store_dir>/snapshot`` (see the module docstring)."""

    def __init__(self, store_dir: str, *, max_reserve: int = 3) -> None:
        if max_reserve < 1:
            raise ValueError(f"max_reserve must be at least 1, got {max_reserve}")
        self.base = os.path.join(store_dir, SNAPSHOT_DIR_NAME)
        self.max_reserve = max_reserve
        os.makedirs(self.base, exist_ok=True)
        tmp = os.path.join(self.base, TMP_DIR_NAME)
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
            fsync_dir(self.base)

    # -- layout ------------------------------------------------------------------------------
    def path_of(self, index: int) -> str:
        return os.path.join(self.base, f"{DIR_PREFIX}{index}")

    def indexes(self) -> list[int]:
        """Indexes of the snapshot directories present, newest first (nothing read in them)."""
        found = []
        for name in os.listdir(self.base):
            m = _DIR_RE.match(name)
            if m and os.path.isdir(os.path.join(self.base, name)):
                found.append(int(m.group(1)))
        return sorted(found, reverse=True)

    def read_meta(self, index: int) -> SnapshotMeta:
        """The meta of snapshot ``index``, checked against its directory name."""
        path = os.path.join(self.path_of(index), META_FILE_NAME)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise CorruptSnapshotError("snapshot meta is missing", path=path) from None
        meta = SnapshotMeta.decode(raw, path)
        if meta.last_included_index != index:
            raise CorruptSnapshotError(f"snapshot meta names index {meta.last_included_index}, its directory "
                                       f"{index}", path=path)
        return meta

    def check(self, index: int) -> SnapshotMeta:
        """The meta of snapshot ``index`` once its data is checked against it (size and CRC;
        presence only for a meta Java wrote); ``CorruptSnapshotError`` naming what is wrong."""
        meta = self.read_meta(index)
        data = os.path.join(self.path_of(index), DATA_FILE_NAME)
        if not os.path.exists(data):
            raise CorruptSnapshotError("snapshot data file is missing", path=data)
        if meta.checked:
            size, crc = file_crc(data)
            if size != meta.data_size:
                raise CorruptSnapshotError(f"snapshot data has {size} bytes, its meta says {meta.data_size}",
                                           path=data)
            if crc != meta.data_crc:
                raise CorruptSnapshotError(f"snapshot data fails its CRC ({crc:#010x}, meta {meta.data_crc:#010x})",
                                           path=data)
        return meta

    # -- reading -----------------------------------------------------------------------------
    def newest(self) -> SnapshotMeta | None:
        """The newest intact snapshot (see the module docstring), None when there is none. A
        damaged newer one is removed, with one log line."""
        for index in self.indexes():
            try:
                return self.check(index)
            except CorruptSnapshotError as exc:
                older = [i for i in self.indexes() if i < index]
                instead = f"trying snapshot_{older[0]}" if older else "no older snapshot left"
                log.warning("snapshot_%d is damaged and removed: %s; %s", index, exc, instead)
                shutil.rmtree(self.path_of(index), ignore_errors=True)
        return None

    def metas(self) -> Iterator[SnapshotMeta]:
        """The metas that parse, newest first (data not checked)."""
        for index in self.indexes():
            try:
                yield self.read_meta(index)
            except CorruptSnapshotError:
                continue

    def open_reader(self, meta: SnapshotMeta) -> SnapshotReader:
        return SnapshotReader(os.path.join(self.path_of(meta.last_included_index), DATA_FILE_NAME), meta)

    # -- writing -----------------------------------------------------------------------------
    def begin_save(self, index: int, term: int) -> PendingSnapshot:
        """Start a snapshot of the state after entry ``index`` (term ``term``): the state
        machine writes ``pending.writer``; then ``pending.commit()`` or ``abort()``."""
        tmp = os.path.join(self.base, TMP_DIR_NAME)
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.mkdir(tmp)
        return PendingSnapshot(self, index, term)

    def begin_install(self, meta: SnapshotMeta) -> InstallTarget:
        """Receive ``meta``'s snapshot from the leader: resumes a partial install of the same
        snapshot (same index, term, size and CRC), else starts afresh."""
        d = os.path.join(self.base, INSTALL_TMP_DIR_NAME)
        target = os.path.join(d, INSTALL_TARGET_FILE_NAME)
        try:
            with open(target, "rb") as f:
                same = SnapshotMeta.decode(f.read(), target) == meta
        except (OSError, CorruptSnapshotError):
            same = False
        if not same:
            if os.path.exists(d):
                shutil.rmtree(d)
            os.mkdir(d)
            _write_file_durably(target, meta.encode())
            fsync_dir(d)
            fsync_dir(self.base)
        return InstallTarget(self, meta)

    def finish_received_install(self) -> SnapshotMeta | None:
        """Put in place a snapshot received whole before a crash (the follower checked it and
        moved its log start, then died before ``finish``): its data complete and matching the
        leader's size and CRC. Returns its meta, or None when there is none (a partial one stays
        to be resumed)."""
        d = os.path.join(self.base, INSTALL_TMP_DIR_NAME)
        target = os.path.join(d, INSTALL_TARGET_FILE_NAME)
        try:
            with open(target, "rb") as f:
                meta = SnapshotMeta.decode(f.read(), target)
        except (OSError, CorruptSnapshotError):
            return None
        install = InstallTarget(self, meta)
        if not install.complete:
            return None
        try:
            done = install.finish()
        except (OSError, CorruptSnapshotError) as exc:
            log.warning("a received snapshot could not be put in place: %s", exc)
            return None
        log.warning("put in place %s, received whole before the node stopped", done)
        return done

    def prune(self) -> list[int]:
        """Remove the snapshots beyond ``max_reserve``, oldest first; returns their indexes."""
        gone = self.indexes()[self.max_reserve:]
        for index in gone:
            shutil.rmtree(self.path_of(index), ignore_errors=True)
        if gone:
            fsync_dir(self.base)
        return gone


__all__ = ["FileSnapshotStore", "InstallOffsetError", "InstallTarget", "PendingSnapshot", "SnapshotReader",
           "SnapshotWriter", "file_crc"]
