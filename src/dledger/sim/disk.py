"""Storage faults for simulations: a fault layer around a node's store, process crash and power loss.

``FaultyStore`` wraps any store and injects, only when a test asks for it:
- ``fail(op, code=DISK_ERROR, times=1)``: the next ``times`` calls of store method ``op``
  (``batch_append_as_leader``, ``batch_append_as_follower``, ``persist_term``, ``truncate``,
  ``get_raw_range``, ...) raise ``DLedgerError(code)`` without touching the store;
- ``full = True``: every append raises DISK_FULL until cleared.
Everything else is passed to the wrapped store unchanged.

Two kinds of crash for file stores:
- ``crash_store(store)``: the process dies. Mappings are closed without msync, without a
  checkpoint and without touching the term file; the page cache survives, so everything written
  through the mappings is still in the files (the kernel writes it back later).
- ``PowerLoss``: the machine loses power. Only what was made durable survives: bytes that an
  msync covered (whole 4 KiB pages, as the kernel writes them), and files written by the
  fsync + rename writer (term file, checkpoint). Every other byte written through a mapping
  since the last power loss is lost, including what an earlier crashed process left in the page
  cache. A store opened with ``store_io=power.io`` maps its segments through recording
  mappings that keep a shadow copy of the durable bytes of each file; ``power_loss(store)``
  crashes the store and writes the shadows back into the files, leaving the directory as the
  disk would hold it after the reboot. By default the outcome is the one that loses the most
  (every unsynced byte); ``power_loss(store, rng)`` keeps a random subset of the unsynced
  512-byte sectors (torn and reordered write-back). ``arm(n)`` makes the process die at the
  n-th mapping write or msync from then on (``SimulatedCrash``), inside an append, a flush or
  an open.
"""

from __future__ import annotations

import mmap as _mmap
import os

from dledger.errors import DISK_ERROR, DISK_FULL, DLedgerError
from dledger.store.store_io import StoreIO

PAGE = 4096
SECTOR = 512

_APPENDS = ("append_as_leader", "batch_append_as_leader", "append_as_follower", "batch_append_as_follower")


class FaultyStore:
    def __init__(self, store) -> None:
        object.__setattr__(self, "inner", store)
        object.__setattr__(self, "full", False)
        object.__setattr__(self, "failures", {})
        object.__setattr__(self, "injected", 0)

    def fail(self, op: str, code: int = DISK_ERROR, times: int = 1) -> None:
        if not callable(getattr(self.inner, op, None)):
            raise ValueError(f"the store has no method {op!r}")
        self.failures[op] = [code, times]

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        failing = self.failures.get(name)
        if failing is None and not (self.full and name in _APPENDS):
            return attr

        def faulty(*args, **kwargs):
            f = self.failures.get(name)
            if f is not None:
                f[1] -= 1
                if f[1] <= 0:
                    del self.failures[name]
                object.__setattr__(self, "injected", self.injected + 1)
                raise DLedgerError(f"injected fault in {name}", f[0])
            if self.full and name in _APPENDS:
                object.__setattr__(self, "injected", self.injected + 1)
                raise DLedgerError("injected: disk full", DISK_FULL)
            return attr(*args, **kwargs)

        return faulty

    def __setattr__(self, name, value) -> None:
        if name in ("full",):
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)


def crash_store(store) -> None:
    """Kill a file store as a process crash would: unmap everything, flush nothing.

    ``store`` may be wrapped in a ``FaultyStore``; a memory store has nothing to lose.
    """
    store = getattr(store, "inner", store)
    lists = [getattr(store, "data_list", None), getattr(store, "index_list", None)]
    for lst in lists:
        if lst is None:
            continue
        for f in lst.files:
            f.close()
        lst.files = []
    store.closed = True


class SimulatedCrash(BaseException):
    """Raised by an armed ``PowerLoss`` at the chosen write: the process dies right there.

    A ``BaseException`` so that no ``except Exception`` in the store can swallow it.
    """


class PowerLoss:
    """Records what every segment mapping made durable; see the module docstring.

    Hand ``io`` to every store under test (opening included, so that every mapping is a
    recording one)::

        pl = PowerLoss()
        store = DLedgerMmapFileStore.open(..., store_io=pl.io)
        ...
        pl.power_loss(store)

    It may also be used as a context manager (``with PowerLoss() as pl``); leaving the block
    changes nothing.
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
        #: the ``StoreIO`` to hand to stores: recording mappings, deletions forgotten
        self.io = _RecordingIO(self)

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


    def forget(self, path: str) -> None:
        """A segment was deleted (durably: the store fsyncs the directory after deleting)."""
        path = os.path.realpath(path)
        self.shadows.pop(path, None)
        self.inodes.pop(path, None)

    def __enter__(self) -> "PowerLoss":
        return self

    def __exit__(self, *exc) -> None:
        pass

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
            crash_store(store)
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


class _RecordingIO(StoreIO):
    """The ``StoreIO`` of a ``PowerLoss``: every mapping records what msync made durable."""

    def __init__(self, power: PowerLoss) -> None:
        self._power = power
        self._cls = None

    def map(self, fd: int, length: int, *, writable: bool) -> _mmap.mmap:
        if self._cls is None:
            self._cls = self._power._mapping_class()
        return self._cls(fd, length, access=_mmap.ACCESS_WRITE if writable else _mmap.ACCESS_READ)

    def deleted(self, path: str) -> None:
        self._power.forget(path)
