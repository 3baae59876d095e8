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


def assert_options_leave_the_others(option: str, flag: str) -> None:
    """Drawing ``option`` (a ``SwarmOptions.from_seed`` keyword, its fields named after it) leaves
    every other field of a seed as it was drawn without it, and puts ``flag`` on the reproduction
    line (so that existing seeds keep their runs)."""
    import dataclasses

    from dledger.sim import SwarmOptions

    for seed in range(20):
        plain = SwarmOptions.from_seed(seed, nodes=3, durability="fsync", store="file")
        drawn = SwarmOptions.from_seed(seed, nodes=3, durability="fsync", store="file", **{option: True})
        fields = {f.name for f in dataclasses.fields(SwarmOptions) if not f.name.startswith(option.rstrip("s"))}
        assert {f: getattr(plain, f) for f in fields} == {f: getattr(drawn, f) for f in fields}
        assert flag in drawn.reproduce() and flag not in plain.reproduce()
