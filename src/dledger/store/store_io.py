"""StoreIO: how the file store reaches its segment files; the seam a simulated disk replaces.

A segment is mapped whole, and every byte of the log is written through its mapping and made
durable by ``msync`` on it (``MmapFile.flush``/``flush_range``). So what a disk can do to a
segment is decided by the mapping object: the production ``StoreIO`` returns a plain
``mmap.mmap``; the simulator's power-loss model (``dledger.sim.disk.PowerLoss``) returns a
recording subclass that keeps a copy of the bytes each msync made durable, and is told of every
segment deletion so that a new file reusing the name starts afresh.

The same object decides how a new segment gets its space (``allocate``: a simulated disk can
refuse with ``ENOSPC``) and hears of every successful msync (``synced``: a simulated disk can
make it cost virtual time).

Rules:
- ``map`` is the only place a segment mapping is created, ``allocate`` the only place a new
  segment file gets its size, ``deleted`` is called after a segment file was unlinked;
  nothing else about the store changes with the ``StoreIO``;
- ``allocate`` raises ``OSError`` (``ENOSPC``/``EDQUOT`` when the disk is full: the segment
  then reports ``DISK_FULL``); a mapping's ``flush`` (msync) raises ``OSError`` when the disk
  could not write the pages (the store then fails: see ``flusher.py``);
- ``synced(nbytes)`` runs after an msync of ``nbytes`` bytes returned successfully, on the
  store's thread; the production one does nothing.
- ``boot_id()`` names the running boot of the machine (Linux's
  ``/proc/sys/kernel/random/boot_id``), or None where it cannot be known: the page cache
  survives whatever keeps the boot, so a store last opened in this same boot lost nothing to
  an unclean shutdown of its process (``store/suspect.py``). A simulated disk starts a new
  boot at each power loss.
- A ``StoreIO`` is handed to ``DLedgerMmapFileStore`` (``store_io=``), which passes it to its
  two ``MmapFileList``s and they to every ``MmapFile``; the default is ``LOCAL_IO``.

``writes_to_disk(what)``: the one gate of the file store's write paths. Every entry point of
the store that writes or syncs anything (leader and follower appends, ``repair``,
``truncate``, ``truncate_to_entry``, ``reset``, ``clean``, ``flush``, ``flush_if_due``,
``persist_term``, ``clear_suspect``) is decorated with it, and it does two things:
- a failed store (``failed`` set) is refused at the door: ``DLedgerError(DISK_ERROR)`` naming
  the first failure, nothing touched;
- an ``OSError`` that reaches it from anywhere below (an msync, an ``fsync``, a write, a
  rename, an unlink, a segment's creation) fails the store (``_fail``: the same fail-stop as a
  failed msync, ``flusher.py``) and is raised as ``DLedgerError(DISK_ERROR)``: a raw
  ``OSError`` never leaves a write path. The places that know better catch first and
  name the failure more precisely: a full disk where it is known harmless (a new segment's
  space, a term or checkpoint file: ``DISK_FULL``, nothing changed, the store does not fail),
  an ``fsync``-mode append whose msync failed (the log end is put back). An ``ENOSPC`` that
  reaches the gate comes from a sync or a directory update (write-back that could not be
  done: the kernel may have dropped the pages), so it fails the store like ``EIO``.
``close`` is not gated (a failed store must still close); it never raises for the disk
(``mmap_file_store.py``). ``load`` refuses an open the disk failed under (``DISK_ERROR``).
"""

from __future__ import annotations

import errno
import functools
import mmap
import os

from dledger.errors import DISK_ERROR, DLedgerError

#: where Linux tells the id of the running boot (a new random UUID at every boot)
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class StoreIO:
    """The real disk: plain shared mappings."""

    def map(self, fd: int, length: int, *, writable: bool) -> mmap.mmap:
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)

    def allocate(self, fd: int, size: int) -> None:
        """Give the new, empty file ``fd`` its ``size`` bytes of disk space: ``posix_fallocate``
        where the file system supports it (a full disk fails here, never later with SIGBUS on
        a write to a hole), else ``ftruncate``."""
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            os.ftruncate(fd, size)

    def synced(self, nbytes: int) -> None:
        """An msync of ``nbytes`` bytes returned successfully."""

    def deleted(self, path: str) -> None:
        """Segment ``path`` was unlinked (the list fsyncs the directory afterwards)."""

    def boot_id(self) -> str | None:
        """The id of the machine's running boot, None where unknown (then every unclean
        shutdown in ``page_cache`` mode is taken for one that may have lost the page cache)."""
        try:
            with open(BOOT_ID_PATH) as f:
                return f.read().strip() or None
        except OSError:
            return None


LOCAL_IO = StoreIO()


def writes_to_disk(what: str):
    """Decorate a write entry point of the file store (see the module docstring): ``what``
    names it in the failure (``"<what> failed: <the OSError>"``). The store supplies
    ``failed``, ``_check_not_failed`` and ``_fail`` (views of ``state.StoreState``)."""

    def gate(method):
        @functools.wraps(method)
        def gated(self, *args, **kwargs):
            if self.failed is not None:
                self._check_not_failed()
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                self._fail(f"{what} failed: {exc}")
                raise DLedgerError(f"store {self.store_dir} failed ({self.failed}); reopen it",
                                   DISK_ERROR) from exc

        gated.writes_to_disk = what
        return gated

    return gate
