"""The simulated disk's faults do exactly what ``dledger.sim.disk`` says, byte for byte, and the
same seed does the same damage: bit flips at rest (``flip_bit``, ``corrupt_store``), lost and
misdirected writes at power loss, the fault atlas that keeps a good copy of every region on a
majority, slow syncs; and, in a 3-node cluster, a node whose msync fails acknowledges nothing
more while the others go on."""

import math
import os
import random
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE
from dledger.protocol import DLedgerResponseCode as Code
from dledger.sim import Cluster
from dledger.sim.fault_atlas import ClusterFaultAtlas
from dledger.sim.corruption import KINDS
from dledger.sim.disk import SECTOR, PowerLoss, SlowSync, corrupt_store, crash_store, flip_bit
from dledger.store import DLedgerMmapFileStore


def _store(path, pl, **kw):
    return DLedgerMmapFileStore.open(str(path), store_io=pl.io, data_file_size=64 * 1024,
                                     index_file_size=32 * 256, **kw)


def _filled(path, n=40, durability="fsync"):
    """A crashed store directory holding ``n`` entries, a checkpoint and a term file."""
    pl = PowerLoss()
    s = _store(path, pl, durability=durability)
    s.persist_term(3, "n1")
    s.batch_append_as_leader([b"entry-%03d" % i * 7 for i in range(n)])
    s.flush()
    crash_store(s)
    return pl


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def _snapshot(d):
    return {os.path.relpath(os.path.join(r, f), d): _read(os.path.join(r, f))
            for r, _dirs, files in os.walk(d) for f in files}


# -- bit flips at rest --------------------------------------------------------------------

def test_flip_bit_flips_exactly_one_bit(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(16)))
    assert flip_bit(str(p), 5, 7) == (5, 5 ^ 0x80)
    data = p.read_bytes()
    assert data[5] == 5 ^ 0x80 and data[:5] + data[6:] == bytes(range(5)) + bytes(range(6, 16))
    flip_bit(str(p), 5, 7)
    assert p.read_bytes() == bytes(range(16))
    with pytest.raises(ValueError):
        flip_bit(str(p), 3, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_store_damages_one_bit_of_the_named_kind(tmp_path, kind):
    d = tmp_path / "s"
    _filled(d)
    before = _snapshot(d)
    c = corrupt_store(str(d), random.Random(5), kinds=(kind,))
    assert c is not None and c.kind == kind
    after = _snapshot(d)
    rel = os.path.relpath(c.path, d)
    assert {k for k in before if before[k] != after[k]} == {rel}
    diff = [(i, a ^ b) for i, (a, b) in enumerate(zip(before[rel], after[rel])) if a != b]
    assert diff == [(c.offset, 1 << c.bit)]
    assert (c.old, c.new) == (before[rel][c.offset], after[rel][c.offset])
    if kind == "data_body":
        assert rel.startswith("data") and "body of entry" in c.field
    elif kind == "data_header":
        assert rel.startswith("data") and " of entry " in c.field
        field = c.field.split(" of ")[0]
        assert field in ("magic", "size", "index", "term", "pos", "channel", "chain_crc", "body_crc", "body_size")
    elif kind == "index":
        assert rel.startswith("index") and " of index unit " in c.field
        unit = int(c.field.rsplit(" ", 1)[1])
        assert c.offset // INDEX_UNIT_SIZE == unit                  # unit k lives at byte 32*k
    else:
        assert rel == ("checkpoint" if kind == "checkpoint" else "currterm")


def test_a_header_flip_lands_inside_the_named_field(tmp_path):
    d = tmp_path / "s"
    _filled(d)                                  # 40 records of 48 + 63 bytes from position 0
    names = ["magic", "size", "index", "term", "pos", "channel", "chain_crc", "body_crc", "body_size"]
    starts = [0, 4, 8, 16, 24, 32, 36, 40, 44, 48]
    for seed in range(12):
        c = corrupt_store(str(d), random.Random(seed), kinds=("data_header",))
        field, _of, _entry, index = c.field.split(" ")
        rec = (BODY_OFFSET + 63) * int(index)
        k = names.index(field)
        assert rec + starts[k] <= c.offset < rec + starts[k + 1], (seed, c)
        flip_bit(c.path, c.offset, c.bit)       # undo, so the next seed walks intact records


def test_corrupt_store_is_deterministic_for_a_seed(tmp_path):
    _filled(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for seed in range(8):
        ca = corrupt_store(str(tmp_path / "a"), random.Random(seed))
        cb = corrupt_store(str(tmp_path / "b"), random.Random(seed))
        assert (ca.kind, os.path.relpath(ca.path, tmp_path / "a"), ca.offset, ca.bit, ca.field) == \
               (cb.kind, os.path.relpath(cb.path, tmp_path / "b"), cb.offset, cb.bit, cb.field)
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")


def test_corrupt_store_respects_allow_and_says_when_nothing_is_allowed(tmp_path):
    d = tmp_path / "s"
    _filled(d)
    assert corrupt_store(str(d), random.Random(1), allow=lambda p, o: False) is None
    only_index = lambda p, o: os.path.basename(os.path.dirname(p)) == "index"   # noqa: E731
    for seed in range(5):
        c = corrupt_store(str(d), random.Random(seed), allow=only_index)
        assert c.kind == "index"


# -- lost and misdirected writes at power loss -------------------------------------------

def _synced_then_lost(tmp_path, name, seed, **damage):
    pl = PowerLoss()
    s = _store(tmp_path / name, pl, durability="fsync")
    s.persist_term(1, None)
    for i in range(30):
        s.batch_append_as_leader([bytes([65 + i % 26]) * 300])
    data_path = s.data_list.files[0].path
    durable = _read(data_path)
    done = pl.power_loss(s, random.Random(seed), **damage)
    return pl, data_path, durable, _read(data_path), done


def test_lost_writes_leave_the_earlier_bytes_of_synced_sectors(tmp_path):
    pl, path, durable, after, done = _synced_then_lost(tmp_path, "s", 3, lose=0.3)
    lost = [d for d in done if d.kind == "lost"]
    assert lost and pl.damage == done
    data_lost = [d for d in lost if d.path == os.path.realpath(path)]
    assert data_lost
    for d in data_lost:
        assert after[d.offset:d.offset + SECTOR] != durable[d.offset:d.offset + SECTOR]
    hit = {d.offset for d in data_lost}
    for lo in range(0, len(durable), SECTOR):                       # every other sector is durable
        if lo not in hit:
            assert after[lo:lo + SECTOR] == durable[lo:lo + SECTOR], lo


def test_misdirected_writes_land_on_another_sector_of_the_same_file(tmp_path):
    pl, path, durable, after, done = _synced_then_lost(tmp_path, "s", 4, misdirect=0.3)
    mis = [d for d in done if d.kind == "misdirected" and d.path == os.path.realpath(path)]
    assert mis
    last = mis[-1]                                                  # later ones may overwrite earlier
    assert after[last.target:last.target + SECTOR] == durable[last.offset:last.offset + SECTOR]
    assert after[last.offset:last.offset + SECTOR] != durable[last.offset:last.offset + SECTOR]


def test_write_damage_is_deterministic_for_a_seed_and_absent_without_rates(tmp_path):
    _, _, _, a, da = _synced_then_lost(tmp_path, "a", 9, lose=0.1, misdirect=0.1)
    _, _, _, b, db = _synced_then_lost(tmp_path, "b", 9, lose=0.1, misdirect=0.1)
    assert a == b and [(d.kind, d.offset, d.target) for d in da] == [(d.kind, d.offset, d.target) for d in db]
    _, _, durable, c, dc = _synced_then_lost(tmp_path, "c", 9)
    assert dc == [] and c == durable                                # fsync mode: everything synced survives


def test_allow_keeps_write_damage_out_of_forbidden_places(tmp_path):
    _, _, durable, after, done = _synced_then_lost(tmp_path, "s", 5, lose=0.5, misdirect=0.5,
                                                   allow=lambda p, o: o >= 4096)
    assert done and all(d.offset >= 4096 and (d.target is None or d.target >= 4096) for d in done)
    assert after[:4096] == durable[:4096]


# -- the fault atlas ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_the_atlas_leaves_every_region_intact_on_a_majority(n):
    ids = [f"n{i}" for i in range(n)]
    atlas = ClusterFaultAtlas(ids, random.Random(n))
    files = ["s/data/00000000000000000000", "s/data/00000000000001048576", "s/index/00000000000000000000",
             "s/checkpoint", "s/currterm"]
    seen = set()
    for f in files:
        for off in range(8192, 1 << 20, 1 << 14):          # away from the boundaries of regions
            damaged = [i for i in ids if atlas.allows(i, f, off)]
            assert len(damaged) == (n - 1) // 2
            seen.update(damaged)
    assert seen == set(ids[:]) if n >= 3 else seen == set()         # every node gets some damage


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 7), seed=st.integers(0, 2 ** 32), region_bytes=st.sampled_from([4096, 65536]),
       offsets=st.lists(st.integers(0, 1 << 24), min_size=1, max_size=20))
def test_no_region_may_be_damaged_on_more_than_a_minority(n, seed, region_bytes, offsets):
    ids = [f"n{i}" for i in range(n)]
    atlas = ClusterFaultAtlas(ids, random.Random(seed), region_bytes=region_bytes)
    for off in offsets:
        for f in ("d/data/00000000000000000000", "d/index/00000000000000000000", "d/currterm"):
            damaged = [i for i in ids if atlas.allows(i, f, off)]
            assert len(damaged) <= (n - 1) // 2 and n - len(damaged) > n // 2


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 7), seed=st.integers(0, 2 ** 32), region_bytes=st.sampled_from([4096, 65536]),
       boundary=st.integers(1, 40), before=st.integers(1, 255), after=st.integers(1, 255))
def test_a_record_across_two_regions_is_damaged_on_a_minority_only(n, seed, region_bytes, boundary, before,
                                                                    after):
    # a record straddling the boundary of two data regions: every replica that may damage any
    # of its bytes (a flipped bit, a lost or misdirected sector) counts
    ids = [f"n{i}" for i in range(n)]
    atlas = ClusterFaultAtlas(ids, random.Random(seed), region_bytes=region_bytes)
    at = boundary * region_bytes
    seg = "d/data/00000000000000000000"
    damaged = {i for i in ids for off in range(at - before, at + after) if atlas.allows(i, seg, off)}
    assert len(damaged) <= (n - 1) // 2
    sectors = {i for i in ids for off in (at - 512, at) if atlas.allows(i, seg, off)}
    assert len(sectors) <= (n - 1) // 2


def test_the_start_of_a_segment_is_no_boundary_for_the_atlas():
    atlas = ClusterFaultAtlas(["a", "b", "c"], random.Random(3), region_bytes=4096)
    first = [i for i in "abc" if atlas.allows(i, "s/data/00000000000000008192", 0)]
    assert first == sorted(atlas.faulty(("data", 2)))


def test_the_atlas_maps_the_same_log_position_to_the_same_region_on_every_node():
    atlas = ClusterFaultAtlas(["a", "b", "c"], random.Random(0), region_bytes=4096)
    assert atlas.region("/x/a/data/00000000000000008192", 100) == ("data", 2)
    assert atlas.region("/y/b/data/00000000000000004096", 4196) == ("data", 2)
    assert atlas.region("/y/b/checkpoint", 3) == ("checkpoint",)
    again = ClusterFaultAtlas(["c", "b", "a"], random.Random(0), region_bytes=4096)
    for off in range(0, 1 << 16, 4096):
        assert again.faulty(("data", off)) == atlas.faulty(("data", off))
    with pytest.raises(ValueError):
        ClusterFaultAtlas(["a", "b"], random.Random(0), faulty_max=2)


# -- slow I/O -----------------------------------------------------------------------------

def test_slow_sync_pauses_for_the_modelled_time(tmp_path):
    pauses = []
    pl = PowerLoss()
    pl.on_sync = SlowSync(pauses.append, base_ms=2, per_mib_ms=1024, rng=random.Random(1), spike=1.0,
                          spike_ms=50)
    s = _store(tmp_path / "s", pl, durability="fsync")
    s.persist_term(1, None)
    s.batch_append_as_leader([b"x" * 100])
    assert pauses == [math.ceil(2 + 148 / 1024 + 50),               # data: one 148-byte record
                      math.ceil(2 + 32 / 1024 + 50)]                # index: one unit
    assert pl.on_sync.total_ms == sum(pauses)
    s.close()


# -- a failing msync in a cluster ---------------------------------------------------------

def _acknowledged(futures):
    return [f.result().index for f in futures if f.done() and f.result().ok]


@pytest.mark.parametrize("victim_role", ["leader", "follower"])
def test_a_node_whose_msync_fails_acknowledges_nothing_more_until_restarted(tmp_path, victim_role):
    with Cluster(n=3, seed=21, store="file", base_dir=tmp_path, durability="fsync") as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        first = [c.append(b"before-%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in first), 2_000)
        lead = c.leader()
        victim = lead if victim_role == "leader" else next(i for i in c.ids if i != lead)
        c.power[victim].fail_syncs(1)                               # one EIO; later msyncs would succeed
        later = [c.append(b"during-%d" % i) for i in range(10)]
        c.run_for(500)
        store = c.servers[victim].store
        assert store.failed is not None and "msync" in store.failed
        end = store.ledger_end_index
        c.run_for(500)
        assert store.ledger_end_index == end                        # the failed node takes nothing more
        c.restart(victim)                                           # the process restarts: recovery
        assert c.servers[victim].store.failed is None
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        more = [c.append(b"after-%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in more), 3_000)
        assert all(f.result().ok for f in more)                     # the cluster goes on
        acked = _acknowledged(first + later + more)
        for i in c.ids:                                             # every acknowledged append is
            c.power_loss(i)                                         # durable on a quorum
        for i in c.ids:
            c.restart(i)
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        final = c.append(b"final")
        assert c.run_until(final.done, 2_000) and final.result().ok
        lead = c.leader()
        assert c.run_until(lambda: c.servers[lead].store.committed_index >= final.result().index, 2_000)
        log = c.servers[lead].store
        assert all(log.get(i) is not None for i in acked)
        c.check()


# -- a full disk in a cluster -------------------------------------------------------------

def test_a_full_disk_at_segment_creation_refuses_appends_and_the_node_keeps_serving(tmp_path):
    with Cluster(n=3, seed=22, store="file", base_dir=tmp_path, durability="fsync",
                 mapped_file_size_for_entry_data=8192, mapped_file_size_for_entry_index=32 * 64) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        first = c.append(b"first")                        # the first segments exist
        assert c.run_until(first.done, 1_000) and first.result().ok
        c.power[lead].no_space = True
        futures = []
        for i in range(40):                               # 40 x 548 bytes need new segments
            futures.append(c.append(b"%03d" % i + b"p" * 497))
            c.run_until(futures[-1].done, 1_000)
        codes = [f.result().code for f in futures]
        assert Code.DISK_FULL in codes and codes[0] == Code.SUCCESS
        full_at = codes.index(Code.DISK_FULL)
        assert all(code == Code.DISK_FULL for code in codes[full_at:])
        assert c.power[lead].injected >= 1
        c.run_for(2_000)
        assert c.leader() == lead                          # heartbeats go on
        store = c.servers[lead].store
        assert store.failed is None
        assert store.get(full_at).body.startswith(b"%03d" % (full_at - 1))      # reads go on
        c.power[lead].no_space = False
        g = c.append(b"room again")
        assert c.run_until(g.done, 1_000) and g.result().ok
        c.check()


def test_a_failing_checkpoint_write_is_reported_and_the_cluster_goes_on(tmp_path):
    with Cluster(n=3, seed=23, store="file", base_dir=tmp_path, disk_faults=True) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        for i in c.ids:
            c.disks[i].fail_checkpoint(times=3)
        futures = [c.append(b"c%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        assert all(f.result().ok for f in futures)
        c.run_for(6_000)                                   # a checkpoint is due every second
        assert all(c.disks[i].injected == 3 for i in c.ids)
        for i in c.ids:                                    # the next writes went through
            store = c.disks[i].inner
            assert store._state.checkpoint.end_index == store.ledger_end_index >= 9
        c.check()
