"""The swarm with membership changes (``--membership``): the nemesis adds members (learner, then
voter), removes them (the leader too), wipes a disk and replaces a lost machine, mixed with every
other fault of the seed (``sim/membership_faults.py``), and I11 checks every commit against the
voters of the leader's configuration.

500 seeds in CI, over memory and file stores, 3 and 5 nodes, both durability modes; the seeds
of the sweeps that once failed; and fresh seeds drawn at every run (``DLEDGER_FRESH_SEED=N``
replays a draw, as ``test_fresh_seeds.py``).
"""

from __future__ import annotations


import pytest

from dledger.sim import SwarmOptions, run_swarm
from helpers.swarm_lists import assert_options_leave_the_others, assert_seed_keeps_every_invariant
from sim.test_fresh_seeds import FIRST_DRAWN

# (seed, nodes, durability, store, safety_ms)
FIXED = ([(s, 3, "page_cache", "memory", None) for s in range(8000, 8150)]
         + [(s, 3, "fsync", "memory", None) for s in range(8000, 8100)]
         + [(s, 5, "page_cache", "memory", None) for s in range(8000, 8070)]
         + [(s, 5, "fsync", "memory", None) for s in range(8000, 8050)]
         + [(s, 3, "fsync", "file", None) for s in range(8000, 8040)]
         + [(s, 3, "page_cache", "file", None) for s in range(8000, 8030)]
         + [(s, 5, "page_cache", "file", None) for s in range(8000, 8020)]
         + [(s, 5, "fsync", "file", None) for s in range(8000, 8020)]
         + [(s, nodes, "page_cache", "memory", 10_000) for s in range(8200, 8210) for nodes in (3, 5)])
assert len(FIXED) == 500
#: seeds of the sweeps that once failed (the bug is fixed): they run with the list
FOUND: dict[tuple, str] = {
    (130, 3, "page_cache", "memory", None): "L1, no leader after healing: a learner added in place of a lost "
                                           "machine was promoted before it had answered; with a new store it "
                                           "voted in no plain round, and no candidate could gather a quorum; a "
                                           "learner is now promoted only once it answered and is not recovering",
    (20092, 5, "fsync", "memory", 20_000): "I1, two leaders of term 1: the leader of term 1, elected by three of "
                                           "five voters, removed two of them; a member that had not voted in "
                                           "term 1 then won term 1 with the two votes the new configuration "
                                           "needed; a voter that holds a change made in a term now votes for "
                                           "nobody in that term",
    (20001, 5, "fsync", "memory", 20_000): "L1, no leader after healing: of four voters one was down for good "
                                          "and two had voted in term 1 for it; their rounds in term 1 ended "
                                          "with too few answers (the fourth answered late) and were held in "
                                          "term 1 for ever; a round that enough voters refused for having "
                                          "voted already now moves to the next term",
    (9000146, 5, "fsync", "memory", None): "I1, two leaders of term 0: two members had voted for n3 in term 0, "
                                          "which lost; the leader of term 0 then removed two members, and n3 "
                                          "won term 0 again with the same two votes, now a quorum of three; a "
                                          "voter holding a change of the term now refuses even a candidate it "
                                          "voted for before",
    (9000239, 3, "page_cache", "memory", None): "L1, no leader after healing: the one member with an "
                                               "up-to-date log held an uncommitted change that removed it, so "
                                               "it stood for nothing, and the others' logs were too short for "
                                               "each other; a member the newest, uncommitted change leaves out "
                                               "now stands until that change commits, then steps down",
    (9200035, 5, "page_cache", "file", None): "L1, no leader after healing: the one node with an up-to-date "
                                             "log held a change made in its term and, refusing its own vote "
                                             "there, tried that term for ever; it now stands in the next one",
    (9400365, 3, "fsync", "file", None): "L1, no leader after healing (the simulator's fault): restarted original "
                                        "nodes were given the peers of the nodes added since, and two that had "
                                        "never written their configuration took different bootstrap ones; "
                                        "an added node now gets peers of its own, the others keep theirs",
    (8073, 3, "fsync", "memory", None): "L1, no leader after healing: a voter whose log had not reached the "
                                       "entry that made it one knew no configuration and refused every plain "
                                       "vote; a node without a configuration but with a log now votes as any "
                                       "voter does",
    (74, 5, "page_cache", "memory", None): "L1, replicas did not converge: two members holding an uncommitted "
                                          "change that left the new leader out refused its heartbeats for good; "
                                          "only a committed configuration now refuses a sender for membership",
    (227, 5, "page_cache", "memory", None): "L1, no leader after healing: a removed node that never saw its "
                                           "removal kept campaigning with a stale voter's help; a voter that "
                                           "refuses it now names the configuration, and it stands no more",
    (1108, 3, "page_cache", "memory", None): "L1, no append committed: a voter behind the entry that made a "
                                            "candidate a voter refused it; a candidate that knows a newer "
                                            "configuration is now judged on its log",
    (1401269, 5, "fsync", "file", None): "L1, replicas did not converge (the checker's fault): the leader that "
                                        "committed the final append stood down once it committed its own "
                                        "removal; the next leader held no entry of its term, so by Raft's "
                                        "commit rule it committed nothing, and two voters never applied the "
                                        "final append; the liveness phase now appends again while the "
                                        "leader's log ends in an earlier term",
}
FRESH = [(FIRST_DRAWN + 700_000_000 + k, nodes, durability, store, None)
         for k, (nodes, durability, store) in enumerate([(3, "page_cache", "memory"), (5, "fsync", "memory"),
                                                         (3, "fsync", "file"), (5, "page_cache", "file")])]
KEYS = FIXED + list(FOUND) + FRESH


def _id(key) -> str:
    seed, nodes, durability, store, safety = key
    return f"{seed}-{nodes}{store[0]}-{'pc' if durability == 'page_cache' else 'fs'}{'-long' if safety else ''}"


def _opts(key) -> SwarmOptions:
    seed, nodes, durability, store, safety = key
    return SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store=store, safety_ms=safety,
                                  membership=True)


@pytest.mark.parametrize("key", KEYS, ids=[_id(k) for k in KEYS])
def test_a_membership_seed_keeps_every_invariant(key, tmp_path):
    assert_seed_keeps_every_invariant(lambda: run_swarm(_opts(key), base_dir=tmp_path))


def test_membership_options_leave_every_other_field_as_the_seed_draws_it():
    assert_options_leave_the_others("membership", "--membership")


def test_the_membership_swarm_really_changes_the_group():
    """Over a few seeds every kind of change happens, and groups end with other members than
    they started with."""
    seen: dict[str, int] = {}
    changed = 0
    for nodes, seeds in ((3, range(8000, 8030)), (5, range(8000, 8020))):
        for seed in seeds:
            r = run_swarm(_opts((seed, nodes, "page_cache", "memory", None)))
            for action, n in r.membership.items():
                seen[action] = seen.get(action, 0) + n
            changed += r.members != ([f"n{i}" for i in range(nodes)], [])
            r.close()
    assert all(seen[a] > 0 for a in ("add", "learner", "promote", "remove", "remove_leader", "wipe", "replace")), seen
    assert changed >= 10, changed


#: snapshots and membership changes together (``--snapshots --membership``, file stores): members
#: added, removed and replaced while logs are trimmed behind snapshots and new members catch up
#: by installs. (seed, nodes, durability)
COMBINED = ([(s, 3, "fsync") for s in range(8300, 8320)] + [(s, 5, "page_cache") for s in range(8300, 8315)]
            + [(s, 3, "page_cache") for s in range(8300, 8310)] + [(s, 5, "fsync") for s in range(8300, 8310)])


def _combined(key) -> SwarmOptions:
    seed, nodes, durability = key
    return SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store="file", membership=True,
                                  snapshots=True)


#: seeds of the combined sweeps that once failed (the bug is fixed): they run with the list
COMBINED_FOUND: dict[tuple, str] = {
    (1510600, 5, "page_cache"): "L1, no leader after healing: n1 held the longest log but was recovering "
                                "(a power cut), so its own vote counted in no plain round, and n3 and n4, "
                                "standing in every term first, had always voted for themselves there; a "
                                "recovering candidate that can no longer win a term now moves to the next",
}


@pytest.mark.parametrize("key", COMBINED + list(COMBINED_FOUND),
                         ids=[f"{s}-{n}f-{'pc' if d == 'page_cache' else 'fs'}-snap"
                              for s, n, d in COMBINED + list(COMBINED_FOUND)])
def test_a_seed_with_snapshots_and_membership_changes_keeps_every_invariant(key, tmp_path):
    assert_seed_keeps_every_invariant(lambda: run_swarm(_combined(key), base_dir=tmp_path))


def test_with_snapshots_members_change_and_catch_up_by_installs(tmp_path):
    """Over a few of those seeds the group really changes and nodes really install snapshots
    (the two together are what the combination is for)."""
    import logging

    installs = []

    class Count(logging.Handler):
        def emit(self, record):
            if "installed the leader's snapshot" in record.getMessage():
                installs.append(record.getMessage())

    handler = Count(logging.INFO)
    root = logging.getLogger("dledger")
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    changes: dict[str, int] = {}
    try:
        for seed, nodes, durability in COMBINED[:10]:
            r = run_swarm(_combined((seed, nodes, durability)), base_dir=tmp_path / str(seed))
            assert r.opts.snapshots and r.opts.membership
            for action, n in r.membership.items():
                changes[action] = changes.get(action, 0) + n
            r.close()
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    assert installs, "no snapshot was installed"
    assert sum(changes.values()) >= 5, changes
