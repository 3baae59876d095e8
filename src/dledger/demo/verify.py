"""The demo's offline check of the replicas, after every node has stopped.

``verify_replicas(store_dirs, load)`` reopens each store read-only (``open_store``) and checks:
- every replica's log reaches the last acknowledged index;
- every entry up to that index is byte-identical (``get_raw``) on all replicas;
- every acknowledged entry is on every replica at its acknowledged index, with the body the
  load sent and the position the leader acknowledged (an entry that is not counts as lost);
- no body is in the log twice (bodies are unique, so a second copy could only come from a
  resend), and every entry of the log is one the load sent: acknowledged, or one whose outcome
  was unknown;
- each append whose outcome was unknown is in the log once or not at all (it is reported, and
  never counted as lost: it was never acknowledged).
The result holds the counts and a list of problems (empty: every check passed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dledger.demo.load import LoadResult, body_for, seq_of
from dledger.store import open_store

MAGIC_NORMAL = 1
SHOW = 10                      # problems listed in full; more are counted


@dataclass
class Verification:
    replicas: int = 0
    checked_to: int = -1               # last index compared on every replica
    lost: int = 0                      # acknowledged entries missing or different somewhere
    differing: int = 0                 # indexes whose bytes differ between replicas
    duplicated: int = 0                # extra copies of a body in the log
    unknown_in_log: int = 0            # unknown-outcome entries found in the log (once)
    unknown_absent: int = 0            # unknown-outcome entries not in the log
    foreign: int = 0                   # log entries neither acknowledged nor unknown
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < SHOW:
            self.problems.append(text)
        elif len(self.problems) == SHOW:
            self.problems.append("(more problems not listed)")


def verify_replicas(store_dirs: list[str], load: LoadResult) -> Verification:
    v = Verification(replicas=len(store_dirs))
    last = load.last_index
    stores = []
    try:
        for d in store_dirs:
            try:
                stores.append(open_store(d))
            except Exception as exc:          # a damaged or missing store is a failed check
                v.problem(f"{d}: cannot be opened: {exc}")
        if len(stores) != len(store_dirs):
            v.lost = load.acknowledged
            return v
        ends = [st.ledger_end_index for st in stores]
        for d, end in zip(store_dirs, ends):
            if end < last:
                v.problem(f"{d}: the log ends at {end}, below the last acknowledged index {last}")
        top = min([last] + ends)
        begin = max(st.ledger_before_begin_index for st in stores) + 1
        v.checked_to = top
        bad_index = _differing(stores, begin, top)
        for i in sorted(bad_index):
            v.problem(f"entry {i} differs between the replicas")
        v.differing = len(bad_index)
        # one pass over the reference log: where each body is, and whether each acknowledged
        # entry is at its index with its bytes and position
        ref = stores[0]
        where: dict[int, list[int]] = {}
        good = bytearray(load.total)
        unknown = set(load.unknown)
        for e in _entries(ref, begin, v):
            if e.magic != MAGIC_NORMAL or len(e.body) < 8:
                continue
            seq = seq_of(e.body)
            where.setdefault(seq, []).append(e.index)
            if (seq < load.total and load.index[seq] == e.index and e.index <= top and e.index not in bad_index
                    and (load.pos[seq] < 0 or e.pos == load.pos[seq]) and e.body == body_for(seq, load.body_size)):
                good[seq] = 1
        for seq in range(load.total):
            if load.index[seq] >= 0 and not good[seq]:
                v.lost += 1
                v.problem(f"acknowledged entry {seq} is not at index {load.index[seq]} on every replica")
        for seq, indexes in where.items():
            if len(indexes) > 1:
                v.duplicated += len(indexes) - 1
                v.problem(f"entry {seq} is in the log {len(indexes)} times (indexes {indexes[:5]})")
            if seq >= load.total or (load.index[seq] < 0 and seq not in unknown):
                v.foreign += 1
                v.problem(f"the log holds entry {seq} at {indexes[0]}, neither acknowledged nor of unknown outcome")
        for seq in unknown:
            if seq in where:
                v.unknown_in_log += 1
            else:
                v.unknown_absent += 1
    finally:
        for st in stores:
            st.close()
    return v


def _raw(store, index: int) -> bytes | None:
    """The stored record of ``index``, or None when it cannot be read (damaged: CRC, header)."""
    try:
        return store.get_raw(index)
    except Exception:
        return None


def _differing(stores, begin: int, top: int, chunk_bytes: int = 4 << 20) -> set[int]:
    """The indexes in ``begin..top`` whose stored records are not byte-identical on every
    store (or cannot be read on one): compared a run of records at a time, and entry by entry
    where a run differs or does not read."""
    bad: set[int] = set()
    i = begin
    while i <= top:
        try:
            raw, n = stores[0].get_raw_range(i, chunk_bytes, max_count=top - i + 1)
        except Exception:
            raw, n = None, 1
        same = raw is not None
        for st in stores[1:] if same else ():
            try:
                same = st.get_raw_range(i, chunk_bytes, max_count=n) == (raw, n)
            except Exception:
                same = False
            if not same:
                break
        if not same:
            for k in range(i, i + n):
                first = _raw(stores[0], k)
                if first is None or any(_raw(st, k) != first for st in stores[1:]):
                    bad.add(k)
        i += n
    return bad


def _entries(store, begin: int, v: Verification):
    """The entries of ``store`` from ``begin`` to its end; one that cannot be read is a problem
    and skipped."""
    for i in range(begin, store.ledger_end_index + 1, 4096):
        hi = min(store.ledger_end_index, i + 4095)
        done = i - 1
        try:
            for e in store.iter_entries(i, hi):
                done = e.index
                yield e
        except Exception:
            for k in range(done + 1, hi + 1):
                try:
                    yield store.get(k)
                except Exception as exc:
                    v.problem(f"entry {k} of {store.store_dir} cannot be read: {exc}")
