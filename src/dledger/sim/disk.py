"""FaultyStore: a fault layer around a node's store, for simulations.

What it injects (each only when a test asks for it, so runs stay deterministic):
- ``fail(op, code=DISK_ERROR, times=1)``: the next ``times`` calls of store method ``op``
  (``batch_append_as_leader``, ``batch_append_as_follower``, ``persist_term``, ``truncate``,
  ``get_raw_range``, ...) raise ``DLedgerError(code)`` without touching the store;
- ``full = True``: every append raises DISK_FULL (RELIABILITY ST-15) until cleared.
Everything else is passed to the wrapped store unchanged.

Not injected yet (the next issue): power loss (unflushed pages lost), torn last writes and
flipped bits. They need the file store's flushed positions and belong in this module.
"""

from __future__ import annotations

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
