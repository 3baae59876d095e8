"""Fresh seeds at every run: besides the fixed lists, which re-prove the same runs, CI draws a
few seeds nobody ran before, so that the suite keeps exploring the fault model.

The seeds come from the operating system's randomness at collection time (a range far above
every fixed list and the documented soak ranges) and are printed in the test ids and in the
report header, so a failure replays: its report carries the one-line ``reproduce:`` command.
``DLEDGER_FRESH_SEED=N`` runs seed N (and the ones after it) instead, to replay a run's draw.
Every configuration of the soak (``python -m dledger.sim soak``) is covered: 3 and 5 nodes,
both durability modes, file stores with the storage faults, each with the default safety
phase and one seed each with the long one.
"""

from __future__ import annotations

import os
import random

import pytest

from dledger.sim import SwarmOptions, run_swarm
from dledger.sim.soak import CONFIGS, LONG_SAFETY_MS
from helpers.swarm_lists import assert_seed_keeps_every_invariant

#: fresh seeds are drawn from [FIRST, FIRST + SPAN)
FIRST, SPAN = 10_000_000, 1_000_000_000
SHORT_PER_CONFIG = 3
LONG_PER_CONFIG = 1


def _draw() -> int:
    fixed = os.environ.get("DLEDGER_FRESH_SEED")
    if fixed:
        return int(fixed)
    return FIRST + random.SystemRandom().randrange(SPAN)


FIRST_DRAWN = _draw()
FRESH = [(FIRST_DRAWN + k, nodes, durability, None)
         for k in range(SHORT_PER_CONFIG) for nodes, durability in CONFIGS]
FRESH += [(FIRST_DRAWN + SHORT_PER_CONFIG + k, nodes, durability, LONG_SAFETY_MS)
          for k in range(LONG_PER_CONFIG) for nodes, durability in CONFIGS]


def _id(key) -> str:
    seed, nodes, durability, safety = key
    return f"{seed}-{nodes}f-{'pc' if durability == 'page_cache' else 'fs'}{'-long' if safety else ''}"


@pytest.mark.parametrize("key", FRESH, ids=[_id(k) for k in FRESH])
def test_a_fresh_seed_keeps_every_invariant(key, tmp_path):
    seed, nodes, durability, safety = key
    opts = SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store="file", safety_ms=safety)
    assert_seed_keeps_every_invariant(lambda: run_swarm(opts, base_dir=tmp_path))
