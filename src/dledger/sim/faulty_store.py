"""FaultyStore: method-level store faults for simulations, around any store.

``FaultyStore(store)`` passes everything to the wrapped store unchanged, and injects, only when
a test asks for it:
- ``fail(op, code=DISK_ERROR, times=1)``: the next ``times`` calls of store method ``op``
  (``batch_append_as_leader``, ``batch_append_as_follower``, ``persist_term``, ``truncate``,
  ``get_raw_range``, ``flush``, ...) raise ``DLedgerError(code)`` without touching the store;
  ``fail("persist_term", DISK_FULL)`` is a term file write that found the disk full;
- ``fail_checkpoint(code=DISK_FULL, times=1)`` (file stores): the next ``times`` checkpoint
  file writes of the wrapped store fail as the disk would fail them (``OSError``: ``ENOSPC``
  for DISK_FULL, ``EIO`` otherwise) before touching the file, from inside whichever call
  writes it (``flush``, ``flush_if_due``, ``truncate``, ...); the store's own handling turns
  that into ``DLedgerError(code)`` (``store/flusher.py``);
- ``full = True``: every append raises DISK_FULL until cleared.
``injected`` counts the faults raised so far.

Faults below the store's methods (a full disk at segment creation, a failing msync, power
loss, damage at rest) are the simulated disk's: ``dledger.sim.disk``.
"""

from __future__ import annotations

import errno

from dledger.errors import DISK_ERROR, DISK_FULL, DLedgerError

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

    def fail_checkpoint(self, code: int = DISK_FULL, times: int = 1) -> None:
        """Make the next ``times`` checkpoint writes of the wrapped file store raise."""
        inner = self.inner
        flusher = getattr(inner, "_flusher", None)
        if flusher is None:
            raise ValueError("the store writes no checkpoint")
        left = [times]
        err = errno.ENOSPC if code == DISK_FULL else errno.EIO

        def failing(cp) -> None:
            left[0] -= 1
            if left[0] <= 0:
                flusher.put_checkpoint = flusher.write_checkpoint_file   # back to the plain writer
            object.__setattr__(self, "injected", self.injected + 1)
            raise OSError(err, f"injected fault in the checkpoint write (endIndex {cp.end_index})",
                          inner.store_dir)

        flusher.put_checkpoint = failing

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
