"""Crash simulation for file stores.

Two kinds of crash, as RELIABILITY.md §3.5 distinguishes them:

- ``crash(store)``: the process dies. Mappings are closed without msync, without a checkpoint
  and without touching the term file; the page cache survives, so everything written through
  the mappings is still in the files (the kernel writes it back later).
- ``PowerLoss``: the machine loses power. Only what was made durable survives: bytes that an
  msync covered (whole 4 KiB pages, as the kernel writes them), and files written by the
  fsync + rename writer (term file, checkpoint). Every other byte written through a mapping
  since the last power loss is lost, including what an earlier crashed process left in the
  page cache. While a ``PowerLoss`` is active, every mapping the store
  creates is a recording subclass of ``mmap.mmap`` that keeps a shadow copy of the durable bytes
  of its file. ``power_loss(store)`` crashes the store and writes the shadows back into the
  files, leaving the directory as the disk would hold it after the reboot.

By default the model is the outcome of a power loss that loses the most (every unsynced byte);
``power_loss(store, rng)`` instead keeps a random subset of the unsynced 512-byte sectors (torn
and reordered write-back).
"""

from __future__ import annotations

import mmap as _mmap
import os
import shutil
import types

import dledger.store.mmap_file as mmap_file_module
from dledger.store.mmap_file import MmapFile

PAGE = 4096
SECTOR = 512


def crash(store) -> None:
    """Kill ``store`` as a process crash would: unmap everything, flush nothing."""
    for lst in (store.data_list, store.index_list):
        for f in lst.files:
            f.close()
        lst.files = []
    store.closed = True


def copy_store(src: str, dst: str) -> str:
    """Copy a (closed or crashed) store directory byte for byte; returns ``dst``."""
    shutil.copytree(src, dst)
    return dst


class SimulatedCrash(BaseException):
    """Raised by an armed ``PowerLoss`` at the chosen write: the process dies right there.

    A ``BaseException`` so that no ``except Exception`` in the store can swallow it.
    """


class PowerLoss:
    """Records what every segment mapping made durable; see the module docstring.

    Use as a context manager around the whole life of the stores under test (opening included,
    so that every mapping is a recording one)::

        with PowerLoss() as pl:
            store = DLedgerMmapFileStore.open(...)
            ...
            pl.power_loss(store)
    """

    def __init__(self) -> None:
        self.shadows: dict[str, bytearray] = {}
        self.inodes: dict[str, int] = {}
        #: every mapping made while active (``kill`` closes those still open)
        self.mappings: list = []
        self._saved = None
        #: mutating operations on mappings seen so far (slice writes and msyncs)
        self.ops = 0
        self._budget: int | None = None

    # -- crash points ----------------------------------------------------------------------
    def arm(self, n: int) -> None:
        """Let ``n`` more mapping writes/msyncs happen, then raise ``SimulatedCrash`` at every
        later one (a dead process does nothing more). Struct ``pack_into`` calls are not seen
        on their own: they land together with the next counted operation."""
        self._budget = n

    def disarm(self) -> None:
        self._budget = None

    def _tick(self) -> None:
        self.ops += 1
        if self._budget is not None:
            if self._budget <= 0:
                raise SimulatedCrash()
            self._budget -= 1

    # -- the recording mapping -------------------------------------------------------------
    def _mapping_class(self):
        shadows, inodes, tick, mappings = self.shadows, self.inodes, self._tick, self.mappings

        class RecordingMmap(_mmap.mmap):
            def __new__(cls, fileno, length, *args, **kwargs):
                obj = super().__new__(cls, fileno, length, *args, **kwargs)
                path = os.path.realpath(f"/proc/self/fd/{fileno}")
                obj._path = path
                inode = os.fstat(fileno).st_ino
                # A file seen for the first time holds durable bytes: a fresh segment is zeros
                # (pre-sized, directory fsynced), an older one was durable before the test
                # began. A file mapped again after a process crash keeps its shadow: what
                # the crashed process left in the page cache is still not durable. (Deleted
                # segments are forgotten, so a new file that reuses name and inode starts anew.)
                if inodes.get(path) != inode:
                    inodes[path] = inode
                    shadows[path] = bytearray(obj[:])
                mappings.append(obj)
                return obj

            def __init__(self, *args, **kwargs):  # mmap.mmap takes its arguments in __new__
                pass

            def __setitem__(self, key, value):
                tick()
                super().__setitem__(key, value)

            def flush(self, offset=0, size=None):
                tick()
                if size is None:
                    size = len(self) - offset
                result = super().flush(offset, size)
                lo = offset - offset % PAGE
                hi = min(len(self), -(-(offset + size) // PAGE) * PAGE)
                shadow = shadows.get(self._path)
                if shadow is not None:
                    shadow[lo:hi] = self[lo:hi]
                return result

        return RecordingMmap

    def _forget(self, path: str) -> None:
        """A segment was deleted (durably: the store fsyncs the directory after deleting)."""
        path = os.path.realpath(path)
        self.shadows.pop(path, None)
        self.inodes.pop(path, None)

    def __enter__(self) -> "PowerLoss":
        forget = self._forget
        original_destroy = MmapFile.destroy

        def destroy(f):
            forget(f.path)
            original_destroy(f)

        self._saved_destroy = original_destroy
        MmapFile.destroy = destroy
        fake = types.SimpleNamespace(mmap=self._mapping_class(), ACCESS_WRITE=_mmap.ACCESS_WRITE,
                                     ACCESS_READ=_mmap.ACCESS_READ,
                                     ALLOCATIONGRANULARITY=_mmap.ALLOCATIONGRANULARITY)
        self._saved = mmap_file_module.mmap
        mmap_file_module.mmap = fake
        return self

    def __exit__(self, *exc) -> None:
        mmap_file_module.mmap = self._saved
        MmapFile.destroy = self._saved_destroy

    # -- the fault -------------------------------------------------------------------------
    def kill(self) -> None:
        """The process dies wherever it is (even inside ``open``): every mapping it made is
        closed unflushed, as ``crash`` does for a store object."""
        for m in self.mappings:
            if not m.closed:
                m.close()
        self.mappings.clear()

    def power_loss(self, store, rng=None) -> None:
        """Crash ``store`` (None: whatever the process had mapped, e.g. a store dying inside
        ``open``) and leave its segments holding only their durable bytes.

        With ``rng`` (a ``random.Random``), each 512-byte sector written since it was last
        synced independently did or did not reach the disk: pending writes torn at sector
        boundaries and reordered across pages and files, as the kernel's write-back may leave
        them. Without it every unsynced byte is lost.
        """
        if store is not None:
            crash(store)
        self.kill()
        for path, shadow in self.shadows.items():
            if not os.path.exists(path):
                continue  # deleted, and the deletion was made durable (directory fsync)
            with open(path, "r+b") as fh:
                if os.fstat(fh.fileno()).st_size != len(shadow):
                    continue
                image = shadow
                if rng is not None:
                    current = fh.read()
                    image = bytearray(shadow)
                    for lo in range(0, len(image), SECTOR):
                        hi = lo + SECTOR
                        if current[lo:hi] != shadow[lo:hi] and rng.random() < 0.5:
                            image[lo:hi] = current[lo:hi]
                fh.seek(0)
                fh.write(image)
        # after the reboot every byte on disk is durable: shadows start afresh
        self.shadows.clear()
        self.inodes.clear()
