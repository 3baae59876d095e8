"""The demo's latency figures: the steady state apart from the start-up stall and the failover
window, and a chart that marks the stall."""

import io
from array import array

import pytest

from dledger.demo import DemoResult
from dledger.demo.failover import Failover
from dledger.demo.load import Ack, LoadResult
from dledger.demo.report import latency_windows, percentile_ms, print_report, write_chart


def _run():
    load = LoadResult(total=0, index=array("q"), pos=array("q"))
    # start-up: two batches sent at 0 s, answered at 0.9 s; steady 2 ms batches; the kill at
    # 2.0 s; batches sent 1.99-2.4 s answered by n1 from 2.5 s; steady again
    load.acks += [Ack(0.9, 0.9, 10, "n0"), Ack(0.9, 0.9, 10, "n0")]
    load.acks += [Ack(1.0 + k * 0.01, 0.002, 10, "n0") for k in range(99)]
    load.acks += [Ack(2.5, 0.51, 10, "n1"), Ack(2.5, 0.3, 10, "n1"), Ack(2.5, 0.1, 10, "n1")]
    load.acks += [Ack(2.6 + k * 0.01, 0.003, 10, "n1") for k in range(50)]
    f = Failover(None, 1000)
    f.killed, f.killed_t = "n0", 2.0
    return load, f


def test_the_windows_split_by_when_each_batch_was_sent():
    load, f = _run()
    w = latency_windows(load, f)
    assert w.first_ack_s == 0.9
    assert [a.latency_s for a in w.startup] == [0.9, 0.9]
    assert [a.latency_s for a in w.failover] == [0.51, 0.3, 0.1]
    assert len(w.steady) == 149
    assert percentile_ms(load, 0.99, w.steady) == pytest.approx(3.0)
    assert percentile_ms(load, 0.99) == pytest.approx(900.0)     # all mixed: the stall dominates


def test_the_report_prints_each_window():
    load, f = _run()
    r = DemoResult(entries=1680, load=load)
    w = latency_windows(load, f)
    r.p50_ms, r.p99_ms = percentile_ms(load, 0.5, w.steady), percentile_ms(load, 0.99, w.steady)
    r.steady_entries, r.failover_entries, r.failover_p99_ms, r.failover_max_ms = 1490, 30, 510.0, 510.0
    r.first_ack_ms, r.startup_entries = 900.0, 20
    out = io.StringIO()
    print_report(r, out)
    text = out.getvalue()
    assert "p99 3.0 ms in steady state" in text and "1,490 entries" in text
    assert "  failover window    : p99 510 ms, max 510 ms (30 entries" in text
    assert "  start-up           : first acknowledgement 900 ms after the first append (20 entries" in text


def test_without_the_spark_extra_the_report_says_how_to_install_it_from_the_checkout(monkeypatch):
    import sys

    from dledger.demo.report import run_audit

    load, _f = _run()
    out = io.StringIO()
    print_report(DemoResult(entries=1680, load=load), out)       # no chart was written
    monkeypatch.setitem(sys.modules, "dledger.spark.audit", None)     # as if pyspark were not installed
    assert run_audit(["a", "b", "c"], "out", out) == 0
    lines = out.getvalue().splitlines()
    hint = "pip install -e '"
    chart = next(x for x in lines if x.startswith("latency chart"))
    audit = next(x for x in lines if x.startswith("replica audit"))
    assert f"not written (matplotlib is missing: {hint}" in chart and "[spark]' from a checkout" in chart
    assert audit.startswith("replica audit        : skipped (") and hint in audit and "dledger[spark]')" not in audit


def test_the_chart_marks_the_start_up_stall(tmp_path):
    load, f = _run()
    import matplotlib.pyplot as plt                  # the spark extra installs it, as the tests do
    seen = []
    real = plt.Axes.axvspan

    def spy(self, *a, **k):
        seen.append((a, k.get("label")))
        return real(self, *a, **k)

    plt.Axes.axvspan = spy
    try:
        assert write_chart(str(tmp_path / "latency.png"), load, f)
    finally:
        plt.Axes.axvspan = real
    assert ((0, 0.9), "start-up: first acknowledgement after 900 ms") in seen
