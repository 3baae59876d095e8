"""The seed sweep: seeded swarm runs (partitions, one-way cuts, crashes and restarts,
message loss, duplication and reordering while clients append), each ending with a healed
liveness phase and every checker. A failing seed prints the one-line command that
reproduces it (``python -m dledger.sim --seed N --nodes K``)."""

import os

import pytest

from dledger.sim import InvariantViolation, SwarmOptions, run_swarm

# DLEDGER_SWEEP_SCALE=10 runs ten times as many seeds (a longer local sweep)
SCALE = max(1, int(os.environ.get("DLEDGER_SWEEP_SCALE", "1")))
SWEEP = ([(seed, 3, "memory") for seed in range(250 * SCALE)]
         + [(seed, 5, "memory") for seed in range(150 * SCALE)]
         + [(seed, 3, "file") for seed in range(1000, 1000 + 16 * SCALE)])


@pytest.mark.parametrize("seed,nodes,store", SWEEP, ids=[f"{s}-{n}{st[0]}" for s, n, st in SWEEP])
def test_seed_keeps_every_invariant(seed, nodes, store, tmp_path):
    opts = SwarmOptions(seed=seed, nodes=nodes, store=store)
    try:
        c = run_swarm(opts, base_dir=tmp_path if store == "file" else None)
    except InvariantViolation as exc:
        pytest.fail(f"reproduce with: {opts.reproduce()}\n{exc}", pytrace=False)
    counts = c.history.counts()
    c.close()
    assert counts["ok"] > 0


def test_same_seed_same_run():
    a = run_swarm(SwarmOptions(seed=42, nodes=3))
    b = run_swarm(SwarmOptions(seed=42, nodes=3))
    assert [(o.invoke_ms, o.complete_ms, o.code, o.index) for o in a.history.ops] == \
           [(o.invoke_ms, o.complete_ms, o.code, o.index) for o in b.history.ops]
    assert a.committed_log() == b.committed_log()
    assert a.scheduler.events_run == b.scheduler.events_run
