"""The hot-path histogram: Prometheus bucket semantics (``le`` inclusive, cumulative, ``+Inf``
equal to the count), scaling to seconds, and the observer's per-operation accounting."""

from concurrent.futures import Future

import pytest
from hypothesis import given, strategies as st

from dledger.core.node import Completion, Ready
from dledger.metrics import Histogram, NodeMetrics
from dledger.metrics.histogram import LATENCY_BUCKETS_MS
from dledger.protocol import AppendEntryResponse, Envelope, PushEntryRequest, PushEntryResponse
from dledger.runtime.driver import APPEND, READ, Op


@given(st.lists(st.floats(min_value=0, max_value=20_000, allow_nan=False), max_size=60))
def test_each_bucket_counts_the_values_at_or_below_its_bound(values):
    h = Histogram(LATENCY_BUCKETS_MS)
    for v in values:
        h.observe(v)
    buckets, count, total = h.snapshot()
    assert count == len(values) and total == pytest.approx(sum(values))
    for le, n in buckets:
        assert n == sum(1 for v in values if v <= le)
    assert buckets[-1] == (float("inf"), len(values))


def test_a_snapshot_in_seconds_scales_bounds_and_sum_but_not_counts():
    h = Histogram(LATENCY_BUCKETS_MS)
    h.observe(0.5)          # ms
    h.observe(2.0)
    buckets, count, total = h.snapshot(0.001)
    assert buckets[0] == (1e-06, 0) and dict(buckets)[0.0005] == 1 and dict(buckets)[0.002] == 2
    assert count == 2 and total == pytest.approx(0.0025)


def test_bounds_must_increase():
    with pytest.raises(ValueError):
        Histogram((1, 1, 2))


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_only_successful_appends_count_with_their_entries_bytes_and_latency():
    clock = Clock()
    m = NodeMetrics("g", "n0", clock)
    ok = AppendEntryResponse(code=200, index=4, positions=[0, 60, 120])
    refused = AppendEntryResponse(code=200 + 1, index=-1)
    ops = [Op(Future(), APPEND, 9_990.0, 30), Op(Future(), APPEND, 9_999.0, 7), Op(Future(), READ, 9_000.0)]
    m.on_ready(Ready([], [Completion(ops[0], ok), Completion(ops[1], refused),
                          Completion(ops[2], AppendEntryResponse(code=200, index=4))]))
    _b, count, total = m.append.latency.snapshot()
    assert count == 1 and total == pytest.approx(10.0)       # 10 s on the clock = 10,000 ms, started at 9,990 ms
    assert m.append.entries.total == 3 and m.append.nbytes.total == 30


def test_a_push_is_timed_from_leaving_to_its_successful_answer_per_follower():
    clock = Clock()
    m = NodeMetrics("g", "n0", clock)
    m.replicate["n1"] = type(m.append)()
    delivered = []
    receive = m.receiver(delivered.append)
    push = PushEntryRequest(count=3, entries=bytes(150))
    m.on_ready(Ready([Envelope("n0", "n1", 77, False, push)], []))
    clock.now += 0.004
    answer = Envelope("n1", "n0", 77, True, PushEntryResponse(code=200))
    receive(answer)
    receive(answer)                               # a duplicate answer is not counted twice
    flow = m.replicate["n1"]
    assert flow.latency.snapshot()[1] == 1 and flow.latency.total == pytest.approx(4.0)
    assert flow.entries.total == 3 and flow.nbytes.total == 150
    assert delivered == [answer, answer]          # every envelope still reaches the node


def test_a_push_refused_by_the_follower_is_not_counted_as_replicated():
    clock = Clock()
    m = NodeMetrics("g", "n0", clock)
    m.replicate["n1"] = type(m.append)()
    receive = m.receiver(lambda env: None)
    m.on_ready(Ready([Envelope("n0", "n1", 5, False, PushEntryRequest(count=2, entries=bytes(100)))], []))
    receive(Envelope("n1", "n0", 5, True, PushEntryResponse(code=502)))     # not SUCCESS
    flow = m.replicate["n1"]
    assert flow.latency.snapshot()[1] == 0 and flow.entries.total == 0


def test_observing_a_value_several_times_at_once_counts_as_observing_it_each_time():
    one, many = Histogram((1, 5, 10)), Histogram((1, 5, 10))
    for value, times in ((0.5, 3), (5, 2), (7.5, 4), (11, 1)):
        for _ in range(times):
            one.observe(value)
        many.observe_times(value, times)
    assert many.counts == one.counts == [3, 2, 4, 1]
    assert many.snapshot() == one.snapshot()
