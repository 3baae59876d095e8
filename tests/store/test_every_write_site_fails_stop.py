"""Every write site of the file store turns an I/O error into the same fail-stop.

The low-level primitives the store writes and syncs with (msync through the simulated disk;
``os.open``, ``os.write``, ``os.fsync``, ``os.replace``, ``os.unlink``, ``os.mkdir``,
``os.posix_fallocate``, ``os.ftruncate``) are wrapped, and a scripted workload that reaches
every write path (follower batches, leader appends, the checkpoint, a repair rewrite of a
record and of an index unit, truncate, truncate to an entry, clean, reset, the term file, the
suspect marker, the periodic flush, close) is run once to list the calls it makes. Then, for
every k, the workload runs again on a fresh directory with the k-th call failing with EIO. For
each k:
- the step that hit it raises ``DLedgerError(DISK_ERROR)``, never a raw ``OSError`` (``close``
  raises nothing and completes);
- the store is failed, and every write entry point refuses at the door with ``DISK_ERROR``
  naming the failure, touching nothing;
- after a power loss (only what a sync made durable survives) the directory reopens to a valid
  log: every entry reads, and every entry acknowledged and synced before the failing step
  (and not being removed by it) is there with its bytes; nothing else but what that step was
  writing appears.
A structural test keeps every public method of the store that writes behind the gate
(``store_io.writes_to_disk``).
"""

from __future__ import annotations

import errno
import inspect
import os

import pytest

from dledger.entry import INDEX_UNIT_SIZE, DLedgerEntry
from dledger.errors import DISK_ERROR, CorruptStoreError, DLedgerError
from dledger.sim.disk import PowerLoss
from dledger.store import DLedgerMmapFileStore
from dledger.store.mmap_file_list import read_index_unit

DATA_SIZE = 8192              # two pages, about 10 records of this workload per data segment
INDEX_SIZE = 8 * INDEX_UNIT_SIZE
GB = 1 << 30

#: the os functions the store writes, syncs, creates and deletes files with
OS_SITES = ("open", "write", "fsync", "replace", "unlink", "mkdir", "posix_fallocate", "ftruncate")


def _body(tag: bytes) -> bytes:
    return (tag + b"." * 700)[:700]


class Injector:
    """Counts every call of a wrapped primitive; the ``fail_at``-th one raises EIO."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.active = False
        self.step = None
        self.calls: list[tuple[str, str]] = []     # (primitive, step)
        self.hit: tuple[str, str] | None = None

    def error(self, site: str, path) -> OSError | None:
        if not self.active:
            return None
        self.calls.append((site, self.step))
        if len(self.calls) == self.fail_at:
            self.hit = (site, self.step)
            return OSError(errno.EIO, f"injected EIO at {site}", str(path))
        return None

    def install(self, monkeypatch, power: PowerLoss) -> None:
        power.sync_fault = lambda path: self.error("msync", path)
        for name in OS_SITES:
            real = getattr(os, name)

            def wrapped(*args, _real=real, _name=name, **kwargs):
                if _name == "mkdir" and os.path.exists(args[0]):
                    return _real(*args, **kwargs)   # EEXIST: no I/O (os.makedirs expects it)
                exc = self.error(_name, args[0] if args else "")
                if exc is not None:
                    raise exc
                return _real(*args, **kwargs)

            monkeypatch.setattr(os, name, wrapped)


class Disk:
    """The disk usage the store reads: low, or high enough to force cleaning."""

    def __init__(self) -> None:
        self.used = 0.10

    def __call__(self, path):
        return (100 * GB, int(self.used * 100 * GB), int((1 - self.used) * 100 * GB))


def _open(path: str, power: PowerLoss, durability: str, disk: Disk) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore.open(path, store_io=power.io, durability=durability, data_file_size=DATA_SIZE,
                                     index_file_size=INDEX_SIZE, disk_usage=disk, flush_interval_ms=10,
                                     checkpoint_interval_ms=10)


@pytest.fixture(scope="module")
def leader_log(tmp_path_factory):
    """A leader's log of 12 entries (term 1): the source of the follower batches and of the
    copies a repair is given."""
    d = tmp_path_factory.mktemp("leader")
    store = DLedgerMmapFileStore.open(str(d / "l"), data_file_size=DATA_SIZE, index_file_size=INDEX_SIZE)
    store.persist_term(1, None)
    store.batch_append_as_leader([_body(b"leader-entry-%02d" % i) for i in range(12)])
    raw = [bytes(store.get_raw(i)) for i in range(12)]
    entries = [store.get(i) for i in range(12)]
    store.close()
    return raw, entries


class Run:
    """The workload on one store, with the model of what its log must hold after each step."""

    def __init__(self, tmp_path, power, injector, durability, leader_log) -> None:
        self.path = str(tmp_path / "s")
        self.power, self.inj, self.durability = power, injector, durability
        self.raw, self.entries = leader_log
        self.disk = Disk()
        self.store = _open(self.path, power, durability, self.disk)
        self.log: dict[int, bytes] = {}         # index -> body, as the log holds it now
        self.synced: set[int] = set()           # entries acknowledged and synced
        self.term = (0, None)                   # the last term and vote persist_term returned

    # -- the model -------------------------------------------------------------------------
    def _sync_all(self) -> None:
        self.synced = set(self.log)

    def _appended(self, first: int, bodies) -> None:
        for k, b in enumerate(bodies):
            self.log[first + k] = b
        if self.durability == "fsync":
            self.synced |= set(range(first, first + len(bodies)))

    def _cut_from(self, index: int) -> None:
        for i in [i for i in self.log if i >= index]:
            del self.log[i]
        self._sync_all()                        # a cut syncs everything before it

    def _drop_through(self, index: int, *, cut: bool) -> None:
        for i in [i for i in self.log if i <= index]:
            del self.log[i]
        self.synced = set(self.log) if cut else {i for i in self.synced if i > index}

    # -- damage at rest (not counted: the injector is paused) -------------------------------
    def _damage(self, lst, pos: int, data: bytes) -> None:
        f = lst.find_file(pos)
        off = pos - f.file_from_offset
        active, self.inj.active = self.inj.active, False
        try:
            f.mm[off:off + len(data)] = data
            f.mm.flush(off - off % 4096, off % 4096 + len(data))
        finally:
            self.inj.active = active

    def damage_body(self, index: int) -> None:
        unit = read_index_unit(self.store.index_list, index)
        last = unit.pos + unit.size - 1
        f = self.store.data_list.find_file(last)
        self._damage(self.store.data_list, last, bytes([f.mm[last - f.file_from_offset] ^ 0x10]))
        with pytest.raises(CorruptStoreError):
            self.store.get(index)

    def damage_unit(self, index: int) -> None:
        self._damage(self.store.index_list, index * INDEX_UNIT_SIZE + 16, (999).to_bytes(8, "big"))
        with pytest.raises(CorruptStoreError):
            self.store.get(index)

    # -- the steps: (name, the gated method it exercises, run, the model's change) ---------
    def steps(self):
        s = self.store
        raw = self.raw

        def follower(lo, hi):
            def run():
                s.batch_append_as_follower(b"".join(raw[lo:hi]), 1)
            return run, lambda: self._appended(lo, [e.body for e in self.entries[lo:hi]])

        def leader(bodies):
            first = [None]

            def run():
                first[0] = s.ledger_end_index + 1
                s.batch_append_as_leader(bodies)
            return run, lambda: self._appended(first[0], bodies)

        def single(body):
            def run():
                s.append_as_leader(DLedgerEntry(body=body))
            return run, lambda: self._appended(max(self.log) + 1, [body])

        def term(t, vote):
            def model():
                self.term = (t, vote)
            return (lambda: s.persist_term(t, vote)), model

        def flush():
            s.update_committed_index(8)
            s.flush()

        def clean():
            self.disk.used = 0.88               # above the force-clean ratio, below disk full
            try:
                s.clean(0)
            finally:
                self.disk.used = 0.10

        def clean_model():
            assert s.ledger_before_begin_index >= 0     # segments were deleted
            self._drop_through(s.ledger_before_begin_index, cut=False)

        def truncate_to_entry():
            s.truncate_to_entry(s.get(18), 2)

        cut = [None]

        def reset():
            cut[0] = b = s.ledger_end_index - 1
            s.reset(b, s.get_entry_term(b))

        return [
            ("term save", "persist_term", *term(1, "n0")),
            ("suspect marker removal", "clear_suspect", s.clear_suspect, lambda: None),
            ("follower batch", "batch_append_as_follower", *follower(0, 6)),
            ("follower batch across segments", "batch_append_as_follower", *follower(6, 12)),
            ("leader append", "batch_append_as_leader", *leader([_body(b"leader-%02d" % i) for i in range(5)])),
            ("leader single append", "append_as_leader", *single(b"single" * 5)),
            ("flush and checkpoint", "flush", flush, self._sync_all),
            ("repair rewrite", "repair", lambda: (self.damage_body(3), s.repair(3, raw[3])), lambda: None),
            ("repair of an index unit", "repair", lambda: (self.damage_unit(4), s.repair(4)), lambda: None),
            ("truncate", "truncate", lambda: s.truncate(15), lambda: self._cut_from(15)),
            ("leader append after the cut", "batch_append_as_leader",
             *leader([_body(b"again-%02d" % i) for i in range(4)])),
            ("term save 2", "persist_term", *term(2, "n1")),
            ("leader append in term 2", "batch_append_as_leader", *leader([_body(b"term-2")])),
            ("truncate to entry", "truncate_to_entry", truncate_to_entry, lambda: self._cut_from(19)),
            # (``remove_prefix`` deletes head segments through the same code as ``clean``)
            ("clean", "clean", lambda: (s.update_committed_index(18), clean()), clean_model),
            ("reset", "reset", reset, lambda: self._drop_through(cut[0], cut=True)),
            ("leader append after the reset", "batch_append_as_leader", *leader([_body(b"after-reset-%d" % i) for i in range(3)])),
            ("periodic flush", "flush_if_due", lambda: s.flush_if_due(10 ** 9), self._sync_all),
            ("close", "close", s.close, self._sync_all),
        ]

    def snapshot(self):
        return dict(self.log), set(self.synced), self.term


#: the step whose repair may leave its entry damaged when it fails
REPAIRS = {"repair rewrite": 3, "repair of an index unit": 4}


def _refuses_every_write(store, raw) -> None:
    """A failed store refuses every gated write at the door, naming its failure."""
    calls = [lambda: store.persist_term(9, None), lambda: store.clear_suspect(),
             lambda: store.batch_append_as_follower(raw[0], 1), lambda: store.batch_append_as_leader([b"x"]),
             lambda: store.append_as_leader(DLedgerEntry(body=b"x")), lambda: store.flush(),
             lambda: store.flush_if_due(10 ** 10), lambda: store.repair(3, raw[3]),
             lambda: store.truncate(1), lambda: store.truncate_to_entry(DLedgerEntry(index=0, term=1), 1),
             lambda: store.clean(0), lambda: store.remove_prefix(5), lambda: store.reset(0, 1)]
    for call in calls:
        with pytest.raises(DLedgerError) as exc:
            call()
        assert exc.value.code == DISK_ERROR and store.failed in str(exc.value)


def _run(tmp_path, durability, leader_log, fail_at, monkeypatch):
    """The workload with the ``fail_at``-th primitive call failing (None: none). Returns the
    run, the injector and, per step done, (name, the model after it); stops at the step
    that failed, after checking what it raised and that the store refuses every write."""
    power = PowerLoss()
    inj = Injector(fail_at)
    run = Run(tmp_path, power, inj, durability, leader_log)
    done = []
    with monkeypatch.context() as m:
        inj.install(m, power)
        for name, method, step, model in run.steps():
            inj.step, inj.active = name, True
            try:
                step()
            except DLedgerError as exc:
                assert inj.hit is not None and inj.hit[1] == name, (name, exc)
                assert exc.code == DISK_ERROR, (name, inj.hit, exc)
                break
            except OSError as exc:
                raise AssertionError(f"a raw OSError escaped from step {name!r} ({inj.hit}): {exc!r}") from exc
            finally:
                inj.active = False
            if inj.hit is not None:             # only close takes it quietly, and still closes
                assert name == "close" and run.store.closed, (name, inj.hit)
                break
            model()
            done.append((name, run.snapshot()))
        if inj.hit is not None:
            assert run.store.failed is not None and f"injected EIO at {inj.hit[0]}" in run.store.failed, \
                (inj.hit, run.store.failed)
            calls = len(inj.calls)
            inj.active = True
            _refuses_every_write(run.store, run.raw)
            inj.active = False
            assert len(inj.calls) == calls      # refused at the door: nothing touched
    return run, inj, done


def _check_reopened(run, inj, before, after) -> None:
    """Power loss, then reopen: a valid log that lost nothing acknowledged and synced."""
    log_before, synced_before, term_before = before
    log_after, _synced_after, term_after = after
    failed_step = inj.hit[1]
    run.power.power_loss(run.store)
    again = _open(run.path, run.power, run.durability, Disk())
    try:
        assert again.failed is None
        lo, hi = again.ledger_before_begin_index + 1, again.ledger_end_index
        got = {}
        for i in range(lo, hi + 1):
            try:
                got[i] = again.get(i).body      # a valid log: every entry reads
            except CorruptStoreError:
                assert REPAIRS.get(failed_step) == i, (failed_step, i)   # the damage it was undoing
        for i in synced_before:
            if log_after.get(i) != log_before[i]:
                continue                        # the failing step removes it: may be gone
            assert lo <= i <= hi, (failed_step, "acknowledged and synced entry lost", i, lo, hi)
            assert got.get(i, log_before[i]) == log_before[i], (failed_step, i)
        for i, body in got.items():             # nothing but the log before or after the step
            assert body in (log_before.get(i), log_after.get(i)), (failed_step, i, body)
        term = (again.current_term, again.vote_for)
        assert term in (term_before, term_after) or (
            term[0] > term_before[0] and term[1] is None and term[0] == again.ledger_end_term), (failed_step, term)
    finally:
        again.close()


@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
def test_an_io_error_at_every_write_site_fails_the_store_and_loses_nothing_synced(tmp_path, monkeypatch,
                                                                                   durability, leader_log):
    clean_run, inj, done = _run(tmp_path / "clean", durability, leader_log, None, monkeypatch)
    assert inj.hit is None and len(done) == len(clean_run.steps())
    total = len(inj.calls)
    per_step = {}
    for site, step in inj.calls:
        per_step.setdefault(step, set()).add(site)
    # the workload reaches every write path, each through at least one primitive (in page_cache
    # mode an append that needs no new segment touches none: it syncs nothing)
    quiet = {name for name, method, *_ in clean_run.steps()
             if durability == "page_cache" and "append" in method}
    assert set(per_step) | quiet == {name for name, *_ in clean_run.steps()}
    sites = set().union(*per_step.values())
    assert {"msync", "open", "write", "fsync", "replace", "unlink", "posix_fallocate"} <= sites, sites
    if durability == "fsync":
        assert "msync" in per_step["repair rewrite"] and "msync" in per_step["leader append"]
    models = done
    start = ({}, set(), (0, None))
    for k in range(1, total + 1):
        run, inj, _done = _run(tmp_path / f"k{k}", durability, leader_log, k, monkeypatch)
        assert inj.hit is not None, k
        j = next(n for n, (name, _s) in enumerate(models) if name == inj.hit[1])
        before = models[j - 1][1] if j else start
        _check_reopened(run, inj, before, models[j][1])


def test_every_write_entry_point_of_the_file_store_is_gated():
    """A public method that may write or sync goes through ``store_io.writes_to_disk``; the
    others only read, change memory, or call a gated one."""
    not_writing = {"get", "get_raw", "get_raw_range", "get_entry_term", "iter_entries",
                   "get_first_log_of_target_term", "damaged", "verify", "update_committed_index",
                   "add_append_hook", "open", "load", "close", "shutdown",
                   "append_as_follower"}          # through batch_append_as_follower
    gated = set()
    for name, member in inspect.getmembers(DLedgerMmapFileStore, callable):
        if name.startswith("_"):
            continue
        if getattr(member, "writes_to_disk", None):
            gated.add(name)
        else:
            assert name in not_writing, f"{name} is neither gated nor known not to write"
    assert gated == {"append_as_leader", "batch_append_as_leader", "batch_append_as_follower", "truncate",
                     "truncate_to_entry", "reset", "flush", "flush_if_due", "clean", "remove_prefix", "repair",
                     "persist_term", "clear_suspect"}
