"""``python -m dledger.sim soak``: what it plans, that it runs seeds in worker processes and
reports their figures, and that a failing seed fails the sweep with its reproduction line."""

import json

import pytest

from dledger.sim import soak
from dledger.sim.soak import CONFIGS, SHORT_OFFSET, Job, plan


def test_the_plan_interleaves_the_configurations_and_keeps_the_two_parts_apart():
    jobs = plan(100, long=6, short=5, safety_ms=20_000)
    assert len(jobs) == 11
    assert [(j.nodes, j.durability) for j in jobs[:4]] == list(CONFIGS)
    assert [j.seed for j in jobs[:6]] == [100, 100, 100, 100, 101, 101]
    assert all(j.safety_ms == 20_000 for j in jobs[:6]) and all(j.safety_ms is None for j in jobs[6:])
    assert [j.seed for j in jobs[6:]] == [100 + SHORT_OFFSET] * 4 + [101 + SHORT_OFFSET]
    assert len(set(jobs)) == len(jobs)


def test_a_sweep_runs_its_seeds_and_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "soak.json"
    rc = soak.main(["--long", "1", "--short", "2", "--safety-ms", "3000", "--jobs", "2", "--quiet",
                    "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    figures = json.loads(out.read_text())
    assert figures["done"] == figures["planned"] == 3 and figures["failed"] == 0
    assert figures["long"]["range"] == [soak.DEFAULT_FIRST_SEED, soak.DEFAULT_FIRST_SEED]
    assert "3/3 seeds passed" in printed


def test_a_failing_seed_fails_the_sweep_and_prints_how_to_replay_it(monkeypatch, capsys):
    def fake(job: Job):
        if job.nodes == 5:
            return job, f"seed {job.seed} failed: I4\nreproduce: python -m dledger.sim swarm --seed {job.seed}", 0
        return job, None, 1000

    monkeypatch.setattr(soak, "run_job", fake)
    monkeypatch.setattr(soak, "ProcessPoolExecutor", _InlinePool)
    rc = soak.main(["--long", "0", "--short", "4", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 1
    assert f"failed: reproduce: python -m dledger.sim swarm --seed {SHORT_OFFSET + soak.DEFAULT_FIRST_SEED}" \
        in captured.out
    assert "2/4 seeds passed" in captured.out
    assert captured.err.count("FAILED seed") == 2


@pytest.mark.parametrize("argv, word", [(["--long", "-1"], "--long"), (["--jobs", "0"], "--jobs")])
def test_bad_arguments_are_refused_naming_the_flag(argv, word, capsys):
    with pytest.raises(SystemExit) as exc:
        soak.main(argv)
    assert exc.value.code == 2 and word in capsys.readouterr().err


class _InlinePool:
    """A pool that runs each job at submit (the test's fake ``run_job`` cannot cross processes)."""

    def __init__(self, max_workers, initializer=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        from concurrent.futures import Future
        f = Future()
        f.set_result(fn(*args))
        return f
