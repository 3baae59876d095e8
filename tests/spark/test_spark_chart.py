"""The audit chart's own logic (no Spark session): which indexes it marks divergent, and
that it draws a PNG for every kind of report."""

from dledger.spark.audit import AuditReport, ReplicaSummary
from dledger.spark.chart import _ranges, divergent_ranges, draw_audit_chart


def copy(replica, term, crc, intact=True):
    return {"replica": replica, "term": term, "pos": 10, "size": 60, "magic": 1, "crc": crc,
            "intact": intact}


def report(divergent=(), corrupt=(), lag=0):
    terms = [{"term": 1, "first": 0, "last": 99, "entries": 100},
             {"term": 2, "first": 100, "last": 199, "entries": 100}]
    reps = [ReplicaSummary(n, f"/x/{n}", 0, 199 - (lag if n == "b" else 0), 2, 150, 200, 1, 0,
                           lag if n == "b" else 0, None, terms) for n in "abc"]
    return AuditReport(reps, 150, 199 - lag, 150, len(divergent),
                       divergent[0]["index"] if divergent else None, 0, None, list(divergent),
                       0, [], len(corrupt), list(corrupt), [], "OK", 0)


def test_ranges_join_consecutive_indexes():
    assert _ranges([7, 1, 3, 2, 2]) == [(1, 3), (7, 7)]
    assert _ranges([]) == []


def test_the_minority_copy_is_the_divergent_one():
    d = [{"index": i, "copies": [copy("a", 1, 5), copy("b", 1, 5), copy("c", 2, 9)]}
         for i in (180, 181, 190)]
    assert divergent_ranges(report(d)) == {"a": [], "b": [], "c": [(180, 181), (190, 190)]}


def test_without_a_majority_every_copy_is_marked():
    d = [{"index": 5, "copies": [copy("a", 1, 5), copy("c", 2, 9)]}]
    assert divergent_ranges(report(d)) == {"a": [(5, 5)], "b": [], "c": [(5, 5)]}


def test_the_chart_is_a_png_for_clean_lagging_divergent_and_corrupt_reports(tmp_path):
    d = [{"index": 190, "copies": [copy("a", 1, 5), copy("b", 1, 5), copy("c", 2, 9)]}]
    c = [{"replica": "a", "segment": 0, "index": 42, "pos": 5, "error": None}]
    for i, rep in enumerate([report(), report(lag=30), report(d), report(corrupt=c)]):
        path = draw_audit_chart(rep, str(tmp_path / f"{i}.png"))
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
