"""The audit's two plans give the same report: index ranges compared inside the tasks (stores
opened with recovery) and one scan with a shuffle (the fallback for stores whose range is
unknown). Ranges are made small here so that they cut segments and terms in the middle."""

import os

import pytest

from dledger.entry import BODY_OFFSET
from dledger.spark import compare, scan
from dledger.spark.audit import run_audit
from dledger.store import open_store
from spark_stores import DATA_FILE_SIZE, bodies, flip_byte, java_entries, write_java_store, \
    write_store

N = 300


def _report(report):
    d = report.to_dict()
    for k in ("seconds", "timings", "outputs"):
        d.pop(k)
    return d


def both_plans(paths, spark, monkeypatch, **kw):
    """(report by tasks, report by shuffle); the first must not fall back to the shuffle."""
    from dledger.spark import audit

    def no_shuffle(*a, **k):
        raise AssertionError("the task plan fell back to the shuffle")

    with monkeypatch.context() as m:
        m.setattr(compare, "RANGE_ENTRIES", 37)
        m.setattr(audit, "_ShuffleFindings", no_shuffle)
        by_tasks = run_audit(paths, spark=spark, **kw)
    with monkeypatch.context() as m:
        m.setattr(compare, "can_split", lambda infos: False)
        by_shuffle = run_audit(paths, spark=spark, **kw)
    return by_tasks, by_shuffle


def three(tmp_path, *, b_len=N, c_tail=0, committed=N - 1, more_terms=False):
    common = bodies(N, seed=5)
    extra = [(2, bodies(40, seed=6))] if more_terms else ()
    a = write_store(str(tmp_path / "a"), common, committed=committed, more_terms=extra)
    b = write_store(str(tmp_path / "b"), common[:b_len], committed=min(committed, b_len - 1),
                    more_terms=extra if b_len == N else ())
    c_body = common[:N - c_tail]
    c_terms = [(2, bodies(c_tail, seed=99))] if c_tail else extra
    c = write_store(str(tmp_path / "c"), c_body, committed=committed, more_terms=c_terms)
    return [a, b, c]


@pytest.mark.parametrize("case", ["clean", "lagging", "divergent", "committed-divergent",
                                  "terms"])
def test_tasks_and_shuffle_agree(dl, tmp_path, monkeypatch, case):
    kw = {}
    if case == "clean":
        paths = three(tmp_path)
    elif case == "lagging":
        paths = three(tmp_path, b_len=N - 77)
    elif case == "divergent":
        paths = three(tmp_path, c_tail=50, committed=N - 60)
    elif case == "committed-divergent":
        paths = three(tmp_path, c_tail=50, committed=N - 60)
        kw = {"committed": N - 10, "max_listed": 7}
    else:
        paths = three(tmp_path, more_terms=True)
    assert compare.can_split([scan.store_info(p) for p in paths])
    by_tasks, by_shuffle = both_plans(paths, dl, monkeypatch, **kw)
    assert _report(by_tasks) == _report(by_shuffle)
    if case == "committed-divergent":
        assert by_tasks.committed_divergent_count == 41 and len(by_tasks.divergent) == 7
    if case == "lagging":
        assert by_tasks.lagging[0]["behind"] == 77


def test_a_flipped_bit_gives_the_same_report_by_either_plan(dl, tmp_path, monkeypatch):
    paths = three(tmp_path)
    with open_store(paths[2]) as st:
        unit = st._reader.index_unit(120)
    seg = os.path.join(paths[2], "data", f"{unit.pos - unit.pos % DATA_FILE_SIZE:020d}")
    flip_byte(seg, unit.pos % DATA_FILE_SIZE + BODY_OFFSET + 3, 0x04)
    by_tasks, by_shuffle = both_plans(paths, dl, monkeypatch)
    assert by_tasks.corrupt_count == 1 and by_tasks.gap_count == 1
    assert _report(by_tasks) == _report(by_shuffle)


def test_java_stores_give_the_same_report_by_either_plan(dl, tmp_path, monkeypatch):
    entries = java_entries(60)
    other = entries[:55] + [(1, 3, bytes([i]) * 20) for i in range(5)]
    a, b = str(tmp_path / "ja"), str(tmp_path / "jb")
    write_java_store(a, entries)
    write_java_store(b, other, current_term=3)
    by_tasks, by_shuffle = both_plans([a, b], dl, monkeypatch, committed=57)
    assert by_tasks.committed_divergent_count == 3
    assert _report(by_tasks) == _report(by_shuffle)
