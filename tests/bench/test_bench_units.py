"""The benchmark's arithmetic: percentiles, a load's summary over the counted window, the
PySyncObj ratio, the batch chosen per payload, and the load generator's accounting against a
fake server whose answers come from another thread."""

import threading
from concurrent.futures import Future

from hypothesis import given, strategies as st

from dledger.bench.load import _Tally, embedded_load
from dledger.bench.runner import Plan, ratios
from dledger.bench.stats import LoadResult, Row, percentile
from dledger.protocol import AppendEntryResponse


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200), st.floats(0, 1))
def test_a_percentile_is_one_of_the_values_and_monotone_in_q(values, q):
    values.sort()
    p = percentile(values, q)
    assert p in values
    assert percentile(values, 0) == values[0] and percentile(values, 1) == values[-1]
    assert percentile(values, min(1.0, q + 0.1)) >= p


def test_completions_before_the_warm_up_are_not_counted():
    t = _Tally()
    t.done += [(0.2, 10, 0.001, True), (1.0, 10, 0.002, True), (2.0, 10, 0.004, True), (2.5, 1, 0.1, False)]
    res = t.result(t0=0.0, warmup_s=0.5, calls=4)
    assert res.committed == 20 and res.seconds == 1.5 and res.failures == 1
    assert res.summary()["committed_per_s"] == round(20 / 1.5, 1)
    assert res.latencies_ms == [2.0, 4.0]


def test_the_ratio_compares_rows_of_the_same_payload_and_load():
    rows = [Row("dledger", "embedded", 128, "page_cache", "saturation", 100_000.0, 1, 2),
            Row("dledger", "embedded", 128, "fsync", "saturation", 50_000.0, 1, 2),
            Row("dledger", "embedded", 128, "page_cache", "rate", 1000.0, 1, 2),
            Row("pysyncobj", "embedded", 128, "page_cache", "saturation", 10_000.0, 100, 200)]
    ratios(rows)
    assert rows[0].extra["ratio"] == 10.0 and rows[1].extra["ratio"] == 5.0
    assert rows[0].to_json()["pysyncobj_committed_per_s"] == 10_000.0
    assert "pysyncobj_committed_per_s" not in rows[2].extra


def test_a_saturation_call_carries_a_bounded_batch_of_bodies():
    plan = Plan(batch_bytes=32 * 1024, max_batch=256)
    assert [plan.batch_for(p) for p in (16, 128, 1024, 16384, 1 << 20)] == [256, 256, 32, 2, 1]


class FakeServer:
    """Answers every append SUCCESS from another thread, as a node's loop thread does."""

    def __init__(self) -> None:
        self.bodies = 0

    def _answer(self, n: int) -> Future:
        f: Future = Future()
        self.bodies += n
        threading.Timer(0.001, f.set_result, [AppendEntryResponse(code=200)]).start()
        return f

    def append(self, body):
        return self._answer(1)

    def batch_append(self, bodies):
        return self._answer(len(bodies))


def test_the_saturation_load_keeps_its_window_and_counts_every_committed_body():
    server = FakeServer()
    res = embedded_load(server, 16, 0.3, batch=8, window=4, warmup_s=0.0)
    assert res.failures == 0 and res.calls > 0
    assert res.committed == res.calls * 8 == server.bodies
    assert isinstance(res, LoadResult) and len(res.latencies_ms) == res.calls


def test_the_fixed_rate_load_issues_about_the_rate():
    server = FakeServer()
    res = embedded_load(server, 16, 0.5, rate=200.0, warmup_s=0.0)
    assert 80 <= res.calls <= 101 and res.committed == res.calls
