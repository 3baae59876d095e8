"""The simulated disk under a node's file store: process crash, power loss, and the disk's faults.

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

The same ``PowerLoss`` is the node's disk, and can be told to misbehave:
- ``no_space = True``: a new segment cannot get its space (``StoreIO.allocate`` raises
  ``ENOSPC``; the store reports ``DISK_FULL``) until cleared;
- ``fail_syncs(times=1, after=0)`` / ``fail_syncs(None)``: the next msync (after ``after``
  more that succeed), or every msync from now on,
  raises ``OSError(EIO)`` and makes nothing durable (the bytes stay in the page cache: a
  process crash keeps them, a power loss loses them); ``heal_syncs()`` ends it;
- ``sync_fault``: a test's own plan, asked with the file's path before every msync (and
  attached term or checkpoint write); an ``OSError`` it returns is raised as a failed sync;
- ``on_sync``: called with the byte count after every msync that succeeded (slow I/O: the
  cluster makes it pause the node's process; ``SlowSync`` computes how long);
- ``attach(store)``: the store's term file and checkpoint writes go through this disk too
  (``no_space``: ENOSPC; ``fail_syncs``: EIO);
- ``power_loss(store, rng, lose=p, misdirect=p, allow=...)``: besides the torn write-back,
  each sector an msync made durable since the last power loss is, with probability ``lose``,
  not on the disk after all (it holds its earlier bytes: a lost write) or, with probability
  ``misdirect``, holds its earlier bytes while its new bytes landed on another sector of the
  same file (a misdirected write). ``allow(path, offset)`` limits where that damage may go
  (``ClusterFaultAtlas``). The damage done is returned and kept in ``damage``.

Damage at rest (bit flips in a crashed node's files) is in ``dledger.sim.corruption``
(``flip_bit``, ``corrupt_store``, re-exported here); method-level store faults are
``FaultyStore`` (``dledger.sim.faulty_store``, re-exported here).
"""

from __future__ import annotations

import errno
import math
import mmap as _mmap
import os
from collections.abc import Callable
from dataclasses import dataclass

from dledger.sim.corruption import Corruption, corrupt_store, flip_bit
from dledger.sim.faulty_store import FaultyStore
from dledger.store.store_io import StoreIO

__all__ = ["Corruption", "FaultyStore", "PowerLoss", "SimulatedCrash", "SlowSync", "WriteDamage",
           "corrupt_store", "crash_store", "flip_bit"]

PAGE = 4096
SECTOR = 512
MIB = 1 << 20


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


@dataclass(frozen=True, slots=True)
class WriteDamage:
    """A synced sector that a power loss left damaged: ``kind`` is ``"lost"`` (the sector at
    ``offset`` holds its earlier bytes) or ``"misdirected"`` (also: its new bytes landed at
    ``target``, overwriting that sector)."""

    kind: str
    path: str
    offset: int
    target: int | None = None


@dataclass(slots=True)
class SlowSync:
    """Slow I/O: each msync of ``nbytes`` costs ``base_ms + per_mib_ms * nbytes / MiB`` of
    virtual time, plus ``spike_ms`` with probability ``spike`` (drawn from ``rng``), rounded up
    to whole milliseconds (virtual time is counted in them) and handed to ``pause(ms)``. Set it
    as a ``PowerLoss``'s ``on_sync``; ``pause`` is meant to hold the node's process back (its
    timers and inbox) for that long after the sync returned."""

    pause: Callable[[int], None]
    base_ms: float = 1.0
    per_mib_ms: float = 5.0
    rng: object | None = None
    spike: float = 0.0
    spike_ms: float = 100.0
    #: virtual time spent in syncs so far
    total_ms: int = 0

    def __call__(self, nbytes: int) -> None:
        ms = self.base_ms + self.per_mib_ms * nbytes / MIB
        if self.spike and self.rng is not None and self.rng.random() < self.spike:
            ms += self.spike_ms
        ms = math.ceil(ms)
        self.total_ms += ms
        self.pause(ms)


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
        #: per file: sector offset -> the durable bytes it held before the last msync that
        #: changed it since the last power loss (what a lost or misdirected write leaves there)
        self.before: dict[str, dict[int, bytes]] = {}
        #: a new segment cannot get its space (ENOSPC) while True
        self.no_space = False
        #: a test's own plan: ``sync_fault(path)`` returns the error of this msync, or None
        self.sync_fault: Callable[[str], OSError | None] | None = None
        #: msyncs still to fail with EIO (-1: every one)
        self._sync_errors = 0
        self._sync_skip = 0
        #: faults raised so far (ENOSPC and EIO)
        self.injected = 0
        #: called with the byte count after each successful msync (slow I/O)
        self.on_sync: Callable[[int], None] | None = None
        #: what the power losses damaged (lost and misdirected writes), oldest first
        self.damage: list[WriteDamage] = []
        #: every mapping made while active (``kill`` closes those still open)
        self.mappings: list = []
        self._saved = None
        #: mutating operations on mappings seen so far (slice writes and msyncs)
        self.ops = 0
        self._budget: int | None = None
        #: True once an armed crash point was reached (``SimulatedCrash`` raised)
        self.fired = False
        #: power losses so far: the machine's boot (``StoreIO.boot_id``) is ``sim-boot-<boots>``,
        #: a new one after each power loss (a process crash keeps the boot and the page cache)
        self.boots = 0
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
        self.fired = False

    def _tick(self) -> None:
        self.ops += 1
        if self._budget is not None:
            if self._budget <= 0:
                self.fired = True
                raise SimulatedCrash()
            self._budget -= 1

    @property
    def armed(self) -> bool:
        return self._budget is not None

    # -- the disk's faults ------------------------------------------------------------------
    def fail_syncs(self, times: int | None = 1, *, after: int = 0) -> None:
        """Make the next ``times`` msyncs (None: every msync from now on) raise EIO, once
        ``after`` more msyncs have succeeded."""
        self._sync_errors = -1 if times is None else times
        self._sync_skip = after

    def heal_syncs(self) -> None:
        self._sync_errors = 0
        self._sync_skip = 0

    def _sync_error(self, path: str) -> OSError | None:
        if self.sync_fault is not None:
            planned = self.sync_fault(path)
            if planned is not None:
                self.injected += 1
                return planned
        if self._sync_errors == 0:
            return None
        if self._sync_skip > 0:
            self._sync_skip -= 1
            return None
        if self._sync_errors > 0:
            self._sync_errors -= 1
        self.injected += 1
        return OSError(errno.EIO, "injected: msync failed", path)

    def _file_write_error(self, path: str) -> OSError | None:
        """The error of a small-file write (term file, checkpoint: tmp, fsync, rename) now:
        ENOSPC while the disk is full, EIO when a sync is to fail."""
        if self.no_space:
            self.injected += 1
            return OSError(errno.ENOSPC, "injected: no space left on device", path)
        return self._sync_error(path)

    def attach(self, store) -> None:
        """Route ``store``'s term file and checkpoint writes through this disk (a full disk
        refuses them with ENOSPC, a failing one with EIO), as its segments already are
        (``io``). Call it once the store is open (the writes of its recovery are not seen)."""
        inner = getattr(store, "inner", store)
        term_file = getattr(inner, "term_file", None)
        if term_file is None:
            return
        flusher = inner._flusher
        write_term, put_checkpoint, error = term_file.writer, flusher.put_checkpoint, self._file_write_error

        def term_writer(path, items, **kw):
            exc = error(path)
            if exc is not None:
                raise exc
            write_term(path, items, **kw)

        def checkpoint_writer(cp):
            exc = error(os.path.join(inner.store_dir, "checkpoint"))
            if exc is not None:
                raise exc
            put_checkpoint(cp)

        term_file.writer = term_writer
        flusher.put_checkpoint = checkpoint_writer

    def _allocate_error(self, fd: int) -> OSError | None:
        if not self.no_space:
            return None
        self.injected += 1
        return OSError(errno.ENOSPC, "injected: no space left on device",
                       os.path.realpath(f"/proc/self/fd/{fd}"))

    # -- the recording mapping -------------------------------------------------------------
    def _mapping_class(self):
        shadows, inodes, tick, mappings = self.shadows, self.inodes, self._tick, self.mappings
        before, sync_error = self.before, self._sync_error

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
                error = sync_error(self._path)
                if error is not None:
                    raise error   # nothing became durable; the bytes stay in the page cache
                result = super().flush(offset, size)
                lo = offset - offset % PAGE
                hi = min(len(self), -(-(offset + size) // PAGE) * PAGE)
                shadow = shadows.get(self._path)
                if shadow is not None:
                    now = self[lo:hi]
                    if shadow[lo:hi] != now:
                        old = before.setdefault(self._path, {})
                        for s in range(lo, hi, SECTOR):
                            k = s - lo
                            if shadow[s:s + SECTOR] != now[k:k + SECTOR]:
                                old[s] = bytes(shadow[s:s + SECTOR])
                        shadow[lo:hi] = now
                return result

        return RecordingMmap


    def forget(self, path: str) -> None:
        """A segment was deleted (durably: the store fsyncs the directory after deleting)."""
        path = os.path.realpath(path)
        self.shadows.pop(path, None)
        self.inodes.pop(path, None)
        self.before.pop(path, None)

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

    def power_loss(self, store, rng=None, *, lose: float = 0.0, misdirect: float = 0.0,
                   allow: Callable[[str, int], bool] | None = None, tear: bool = True) -> list[WriteDamage]:
        """Crash ``store`` (None: whatever the process had mapped, e.g. a store dying inside
        ``open``) and leave its segments holding only their durable bytes.

        With ``rng`` (a ``random.Random``), each 512-byte sector written since it was last
        synced independently did or did not reach the disk: pending writes torn at sector
        boundaries and reordered across pages and files, as the kernel's write-back may leave
        them. Without it every unsynced byte is lost.

        With ``rng`` and ``lose``/``misdirect``, each sector an msync changed since the last
        power loss is then, with those probabilities, a lost write (it holds its earlier bytes)
        or a misdirected one (its earlier bytes, and its new bytes over another sector of the
        file), wherever ``allow(path, offset)`` permits (for a misdirected write, at both
        places). Returns that damage (also appended to ``damage``). ``tear=False``: every
        unsynced byte is lost even with ``rng`` (which then only draws the write damage).
        """
        if store is not None:
            crash_store(store)
        self.kill()
        done: list[WriteDamage] = []
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
                        if tear and current[lo:hi] != shadow[lo:hi] and rng.random() < 0.5:
                            image[lo:hi] = current[lo:hi]
                    if lose or misdirect:
                        done.extend(self._damage_synced(path, image, shadow, rng, lose, misdirect, allow))
                fh.seek(0)
                fh.write(image)
        # after the reboot every byte on disk is durable: shadows start afresh
        self.boots += 1
        self.shadows.clear()
        self.inodes.clear()
        self.before.clear()
        self.damage.extend(done)
        return done

    def _damage_synced(self, path: str, image: bytearray, shadow: bytearray, rng, lose: float,
                       misdirect: float, allow) -> list[WriteDamage]:
        done = []
        sectors = len(image) // SECTOR
        for lo, old in self.before.get(path, {}).items():
            if old == shadow[lo:lo + SECTOR]:
                continue        # the sector was synced back to what it held: nothing to lose
            r = rng.random()
            if r >= lose + misdirect or (allow is not None and not allow(path, lo)):
                continue
            if r < lose:
                image[lo:lo + SECTOR] = old
                done.append(WriteDamage("lost", path, lo))
                continue
            target = rng.randrange(sectors) * SECTOR
            if target == lo or (allow is not None and not allow(path, target)):
                continue
            image[lo:lo + SECTOR] = old
            image[target:target + SECTOR] = shadow[lo:lo + SECTOR]
            done.append(WriteDamage("misdirected", path, lo, target))
        return done


class _RecordingIO(StoreIO):
    """The ``StoreIO`` of a ``PowerLoss``: every mapping records what msync made durable."""

    def __init__(self, power: PowerLoss) -> None:
        self._power = power
        self._cls = None

    def map(self, fd: int, length: int, *, writable: bool) -> _mmap.mmap:
        if self._cls is None:
            self._cls = self._power._mapping_class()
        return self._cls(fd, length, access=_mmap.ACCESS_WRITE if writable else _mmap.ACCESS_READ)

    def allocate(self, fd: int, size: int) -> None:
        error = self._power._allocate_error(fd)
        if error is not None:
            raise error
        super().allocate(fd, size)

    def synced(self, nbytes: int) -> None:
        on_sync = self._power.on_sync
        if on_sync is not None:
            on_sync(nbytes)

    def deleted(self, path: str) -> None:
        self._power.forget(path)

    def boot_id(self) -> str | None:
        return f"sim-boot-{self._power.boots}"
