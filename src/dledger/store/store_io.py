"""StoreIO: how the file store reaches its segment files; the seam a simulated disk replaces.

A segment is mapped whole, and every byte of the log is written through its mapping and made
durable by ``msync`` on it (``MmapFile.flush``/``flush_range``). So what a disk can do to a
segment is decided by the mapping object: the production ``StoreIO`` returns a plain
``mmap.mmap``; the simulator's power-loss model (``dledger.sim.disk.PowerLoss``) returns a
recording subclass that keeps a copy of the bytes each msync made durable, and is told of every
segment deletion so that a new file reusing the name starts afresh.

Rules:
- ``map`` is the only place a segment mapping is created, ``deleted`` is called after a
  segment file was unlinked; nothing else about the store changes with the ``StoreIO``.
- A ``StoreIO`` is handed to ``DLedgerMmapFileStore`` (``store_io=``), which passes it to its
  two ``MmapFileList``s and they to every ``MmapFile``; the default is ``LOCAL_IO``.
"""

from __future__ import annotations

import mmap


class StoreIO:
    """The real disk: plain shared mappings."""

    def map(self, fd: int, length: int, *, writable: bool) -> mmap.mmap:
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)

    def deleted(self, path: str) -> None:
        """Segment ``path`` was unlinked (the list fsyncs the directory afterwards)."""


LOCAL_IO = StoreIO()
