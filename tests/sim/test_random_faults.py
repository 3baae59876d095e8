"""The CI seed list of the swarm (``dledger.sim.swarm``): a fixed list of seeds, 3 and 5 nodes,
both durability modes, memory stores for most and file stores (with power loss and every
storage fault: bit flips, lost and misdirected writes, a full disk, failing and slow syncs,
crashes inside a write) for some. Each seed runs a safety phase under faults (partitions of
several shapes, crashes, restarts, message loss, duplication, replay, corruption in transit,
clogged links, paused processes, clock drift) with clients appending, reading in every mode
and driving the key-value machine, then a healed liveness phase, then every checker. A failing
seed fails its test with its options and the one-line command that reproduces it.

``KNOWN_FAILURES`` lists, in this one place, the seeds of the list that fail today because of
an open bug (docs/simulation.md, "Bugs found (open)"), with the invariant they break; they are
run by ``test_known_failures_still_fail`` so that a fix shows up (and the entry must go).
``DLEDGER_SWEEP_SCALE=10`` runs ten times as many seeds (a longer local sweep)."""

import os

import pytest

from dledger.sim import SwarmOptions, run_swarm
from helpers.swarm_lists import assert_known_failures_still_fail, assert_seed_keeps_every_invariant

SCALE = max(1, int(os.environ.get("DLEDGER_SWEEP_SCALE", "1")))


def _seeds(first: int, count: int, nodes: int, durability: str, store: str) -> list[tuple]:
    return [(s, nodes, durability, store) for s in range(first, first + count * SCALE)]


CI_SEEDS = (_seeds(0, 350, 3, "page_cache", "memory") + _seeds(0, 200, 3, "fsync", "memory")
            + _seeds(0, 200, 5, "page_cache", "memory") + _seeds(0, 150, 5, "fsync", "memory")
            + _seeds(1000, 50, 3, "page_cache", "file") + _seeds(1000, 50, 3, "fsync", "file")
            + _seeds(1000, 20, 5, "page_cache", "file") + _seeds(1000, 20, 5, "fsync", "file"))

#: (seed, nodes, durability, store) -> the invariant it breaks and the open bug behind it
KNOWN_FAILURES: dict[tuple, str] = {}

#: seeds that found a bug now fixed, each kept as a named regression test (docs/simulation.md,
#: "Bugs found"): (seed, nodes, durability, store) -> what it found
FIXED: dict[tuple, str] = {
    (1034, 3, "page_cache", "file"): "stale READ_INDEX_READ after a same-term re-election",
    (2003, 3, "page_cache", "file"): "stale READ_INDEX_READ after a same-term re-election",
    (2005, 3, "page_cache", "file"): "stale READ_INDEX_READ and LEASE_READ after a same-term re-election",
    (2067, 3, "page_cache", "file"): "stale READ_INDEX_READ after a same-term re-election",
    # protocol-aware recovery: a node that lost its unsynced tail in a power cut voted and was
    # counted toward commits at once, so acknowledged appends were overwritten
    (2069, 3, "page_cache", "file"): "replicas committed different entries after power loss of one node",
    (2088, 3, "page_cache", "file"): "acknowledged entry overwritten after power loss of one node",
    (2134, 3, "page_cache", "file"): "acknowledged appends gone after power loss of one node",
    (2143, 3, "page_cache", "file"): "acknowledged log replaced from index 0 after power loss of one node",
    # found by the sweep while recovery was built: every node recovering, the less up to date
    # candidate kept asking first and unanimous rounds never passed (no leader after healing)
    (2049, 3, "page_cache", "file"): "unanimous rounds livelocked after every node restarted recovering",
    (2099, 3, "page_cache", "file"): "unanimous rounds livelocked after every node restarted recovering",
    # a power cut tore a no-op record's header after its first 22 bytes: its pos read 0, and
    # recovery (checking pos only for records with a CRC) kept it; committed bytes differed
    (2186, 5, "page_cache", "file"): "committed prefixes differ after a torn no-op record was kept",
}

PASSING = [k for k in CI_SEEDS if k not in KNOWN_FAILURES]


def _id(key: tuple) -> str:
    seed, nodes, durability, store = key
    return f"{seed}-{nodes}{store[0]}-{'pc' if durability == 'page_cache' else 'fs'}"


def _run(key: tuple, tmp_path, *, storage_faults: bool = True):
    seed, nodes, durability, store = key
    # every fault the store can have (file stores: the storage faults too; a memory store has
    # no disk to fault); the regression seeds keep the fault model they were found with
    # (storage_faults=False), so that they replay the schedule that broke the invariant
    opts = SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store=store,
                                  storage_faults=storage_faults)
    return run_swarm(opts, base_dir=tmp_path if store == "file" else None)


@pytest.mark.parametrize("key", PASSING, ids=[_id(k) for k in PASSING])
def test_seed_keeps_every_invariant(key, tmp_path):
    assert_seed_keeps_every_invariant(lambda: _run(key, tmp_path))


@pytest.mark.parametrize("key", list(FIXED), ids=[f"{_id(k)}-{FIXED[k].split(' after')[0].replace(' ', '_')}" for k in FIXED])
def test_regression_seed_found_by_the_swarm(key, tmp_path):
    """A seed that once broke an invariant (the bug is fixed; FIXED says which)."""
    r = _run(key, tmp_path, storage_faults=False)
    assert r.history.counts()["ok"] > 0
    r.close()


def test_known_failures_still_fail(tmp_path):
    assert_known_failures_still_fail(KNOWN_FAILURES, _run, tmp_path)


def test_the_ci_list_covers_both_sizes_both_durabilities_and_both_stores():
    assert len(CI_SEEDS) >= 1_000
    assert {(n, d, s) for _seed, n, d, s in CI_SEEDS} == {
        (n, d, s) for n in (3, 5) for d in ("page_cache", "fsync") for s in ("memory", "file")}
