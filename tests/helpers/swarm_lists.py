"""What the swarm's CI seed lists assert, shared by ``tests/sim/test_random_faults.py`` and
``tests/sim/test_storage_fault_seeds.py``: a seed of a list keeps every invariant (a failure
reports its options and reproduction line, not a traceback), and each known failure still
breaks the invariant named for it (so that a fix shows up)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dledger.sim import SwarmFailure


def assert_seed_keeps_every_invariant(run: Callable[[], object]) -> None:
    """``run()`` runs one seed (``run_swarm``); it must pass and acknowledge something."""
    failure = None
    try:
        r = run()
    except SwarmFailure as exc:
        failure = str(exc)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    counts = r.history.counts()
    r.close()
    assert counts["ok"] > 0


def assert_known_failures_still_fail(known: dict, run: Callable[[tuple, object], object], tmp_path) -> None:
    """Each of ``known`` (key -> the invariant it breaks) still fails with that invariant;
    once a fix makes one pass this fails: move the seed back into the list and the bug to
    "Bugs found" in docs/simulation.md."""
    for k, (key, why) in enumerate(known.items()):
        with pytest.raises(SwarmFailure) as exc:
            run(key, tmp_path / str(k))
        assert why.split(":")[0] in str(exc.value), (key, str(exc.value)[:500])
