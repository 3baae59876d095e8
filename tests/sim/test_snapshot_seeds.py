"""The swarm with snapshots (``--snapshots``, file stores): the key-value machine takes
snapshots, logs are trimmed behind them, followers catch up by streamed installs, and snapshot
files are damaged now and then, mixed with every other fault of the seed
(``sim/snapshot_faults.py``). Each seed also checks applied exactly once across snapshots and
installs (every key-value machine of every incarnation holds the same hash chain at every index
it reached).

A fixed list in each configuration, a few seeds with the long safety phase (where logs grow
past several snapshots and segments), and fresh seeds drawn at every run as
``test_fresh_seeds.py`` draws them (``DLEDGER_FRESH_SEED=N`` replays a draw).
"""

from __future__ import annotations


import pytest

from dledger.sim import SwarmOptions, run_swarm
from dledger.sim.soak import CONFIGS
from helpers.swarm_lists import assert_options_leave_the_others, assert_seed_keeps_every_invariant
from sim.test_fresh_seeds import FIRST_DRAWN

LONG_MS = 10_000
FIXED = ([(s, 3, "page_cache", None) for s in range(5000, 5030)] + [(s, 3, "fsync", None) for s in range(5000, 5030)]
         + [(s, 5, "page_cache", None) for s in range(5000, 5010)] + [(s, 5, "fsync", None) for s in range(5000, 5010)]
         + [(s, nodes, durability, LONG_MS) for s in range(5100, 5103) for nodes, durability in CONFIGS])
#: seeds of the sweeps that once failed (the bug is fixed): they run with the list
FOUND: dict[tuple, str] = {
    (3100061, 3, "page_cache", LONG_MS): "L1, no leader after healing, then no append committed: the one node "
                                         "that could win waited for a snapshot (its own were damaged) and, "
                                         "once leader, could neither send one nor apply; it now moves the log "
                                         "start of a follower that holds its begin entry and hands leadership over",
    (3100221, 3, "page_cache", LONG_MS): "L1, replicas did not converge: a follower's committed entry 0 was "
                                         "damaged and no peer held it any more (trimmed behind snapshots); it "
                                         "now asks the leader for its snapshot",
    (4200090, 5, "fsync", LONG_MS): "L1, replicas did not converge: a pad written for an entry that a power cut "
                                    "then lost stayed after the follower's last entry, so the leader's next "
                                    "entry, smaller and placed before the pad, was refused there for good; "
                                    "the pad is now dropped",
    (4300093, 5, "page_cache", LONG_MS): "L1, replicas did not converge: after a power loss a follower's first "
                                         "entries were damaged, all below the snapshot it loaded and trimmed on "
                                         "every peer; it refused every match above them (a damaged copy never "
                                         "counts), though a durable snapshot covers them; such entries are no "
                                         "longer held against a match",
    (5200124, 5, "fsync", LONG_MS): "L1, replicas did not converge: a follower died between moving its log "
                                    "start for an install and putting the snapshot in place; it restarted "
                                    "needing a snapshot, the new leader's only one was older than its log "
                                    "start, and the log-start move finished at the open placed its next entry "
                                    "elsewhere than the leader's; now the received snapshot is put in place at "
                                    "the open, a refused older snapshot makes the leader take a newer one, and "
                                    "an empty log takes the leader's position",
    (7300009, 5, "page_cache", None): "L1, replicas did not converge: the leader of term 0 lost its page cache, "
                                      "restarted and, probing in its own term, won term 0 again with the same "
                                      "voters, then appended another entry 21 of term 0 than the one a follower "
                                      "held; a suspect node that voted for itself in its term now campaigns in "
                                      "the next one",
}
#: drawn apart from the other fresh seeds' range
FRESH = [(FIRST_DRAWN + 500_000_000 + k, nodes, durability, LONG_MS if k else None)
         for k in range(2) for nodes, durability in CONFIGS]


def _id(key) -> str:
    seed, nodes, durability, safety = key
    return f"{seed}-{nodes}f-{'pc' if durability == 'page_cache' else 'fs'}{'-long' if safety else ''}"


def _run(key, tmp_path):
    seed, nodes, durability, safety = key
    opts = SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store="file", safety_ms=safety,
                                  snapshots=True)
    assert opts.snapshots and opts.snapshot_threshold > 0
    return run_swarm(opts, base_dir=tmp_path)


@pytest.mark.parametrize("key", FIXED + list(FOUND) + FRESH, ids=[_id(k) for k in FIXED + list(FOUND) + FRESH])
def test_a_snapshot_seed_keeps_every_invariant(key, tmp_path):
    assert_seed_keeps_every_invariant(lambda: _run(key, tmp_path))


def test_snapshot_options_leave_every_other_field_as_the_seed_draws_it():
    assert_options_leave_the_others("snapshots", "--snapshots")


def test_the_snapshot_swarm_installs_trims_and_checks_the_hash_chain(tmp_path, monkeypatch):
    """Over long seeds the run really trims logs and installs snapshots, and a state machine
    whose state after loading a snapshot is not the one saved is caught (I10)."""
    import hashlib
    import logging

    from dledger.sim import SwarmFailure
    from dledger.sim.kv import SnapshotKVStateMachine

    seen = {"installed the leader": 0, "dropped": 0}

    class Count(logging.Handler):
        def emit(self, record):
            for k in seen:
                if k in record.getMessage():
                    seen[k] += 1

    handler = Count(logging.INFO)
    root = logging.getLogger("dledger")
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        seed = None
        for seed in range(200, 220):
            before = seen["installed the leader"]
            _run((seed, 3, "fsync", LONG_MS), tmp_path / str(seed)).close()
            if seen["installed the leader"] > before and seen["dropped"]:
                break
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    assert seen["installed the leader"] > 0 and seen["dropped"] > 0, seen

    load = SnapshotKVStateMachine.on_snapshot_load

    def load_one_entry_twice(self, reader):   # as if the snapshot's last entry were applied again
        load(self, reader)
        self.digest = hashlib.sha256(self.digest).digest()

    monkeypatch.setattr(SnapshotKVStateMachine, "on_snapshot_load", load_one_entry_twice)
    with pytest.raises(SwarmFailure, match="I10 applied exactly once across snapshots"):
        _run((seed, 3, "fsync", LONG_MS), tmp_path / "mutated")
