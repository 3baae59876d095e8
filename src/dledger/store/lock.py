"""The store directory lock: one writer per store.

A writable open takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<store_dir>/lock`` and writes the
holder (``pid=<pid> host=<host name>``) into it. A second writable open of the same directory,
in this process (another file descriptor: flock locks are per open file description) or in
another process, fails with ``StoreLockedError`` naming the holder. The lock goes with the file
descriptor: ``release`` on close, and the kernel drops it when the process dies, so a crashed
holder never blocks a restart. The file itself stays (an empty or stale ``lock`` file is not a
lock). Read-only opens never take it. Java DLedger ignores extra files in a store directory.

Within one process the locks held are also kept in a registry with a liveness test of their
owner (``owner_closed``): a store that died without ``close`` (a crash simulated by
``dledger.sim.disk.crash_store``, which marks it closed and keeps the object) gives its lock up
to the next open, as the kernel does for a dead process.
"""

from __future__ import annotations

import fcntl
import gc
import os
import socket
import weakref
from collections.abc import Callable

from dledger.errors import StoreLockedError

LOCK_FILE_NAME = "lock"

#: locks held in this process, by real path of the lock file
_HELD: "weakref.WeakValueDictionary[str, StoreLock]" = weakref.WeakValueDictionary()


class StoreLock:
    """An exclusive lock on a store directory, held from ``acquire`` to ``release``."""

    def __init__(self, store_dir: str, owner_closed: Callable[[], bool] = lambda: False) -> None:
        self.path = os.path.join(store_dir, LOCK_FILE_NAME)
        self._fd: int | None = None
        self._owner_closed = owner_closed
        self._created = False

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise ``StoreLockedError`` naming the holder."""
        if self._fd is not None:
            return
        key = os.path.realpath(self.path)
        other = _HELD.get(key)
        if other is not None and other is not self and other._owner_closed():
            other.release()  # its store died without close: the "process" is gone
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            self._created = True
        except FileExistsError:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._created = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if _HELD.get(key) is not None:
                    raise
                gc.collect()  # a store dropped without close, not yet collected
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip() or "unknown holder"
            finally:
                os.close(fd)
            raise StoreLockedError(f"store {os.path.dirname(self.path)} is locked by another "
                                   f"writer ({holder}); open it read-only or stop that writer",
                                   path=self.path, holder=holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        _HELD[key] = self

    def release(self, *, undo: bool = False) -> None:
        """Drop the lock (closing the descriptor releases it). Idempotent. ``undo``: the open
        was refused; the lock file goes too if this open created it (a refused open leaves
        the directory as it found it)."""
        fd, self._fd = self._fd, None
        if fd is not None and undo and self._created:
            try:
                os.unlink(self.path)
            except FileNotFoundError:  # pragma: no cover - removed by hand
                pass
        if fd is not None:
            key = os.path.realpath(self.path)
            if _HELD.get(key) is self:
                del _HELD[key]
            os.close(fd)
