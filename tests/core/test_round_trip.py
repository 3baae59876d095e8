"""How long a vote round waits: the slowest recent round trip, within bounds."""

from hypothesis import given, strategies as st

from dledger.core.round_trip import RoundTrips


def test_a_round_waits_the_floor_until_a_slow_answer_is_seen():
    rt = RoundTrips()
    assert rt.round_ms(100, 300) == 100
    rt.record(40)
    assert rt.round_ms(100, 300) == 100
    rt.record(180)
    assert rt.round_ms(100, 300) == 270


def test_a_round_never_waits_longer_than_the_cap():
    rt = RoundTrips()
    rt.record(10_000)
    assert rt.round_ms(100, 300) == 300


def test_fast_answers_bring_the_estimate_back_down():
    rt = RoundTrips()
    rt.record(400)
    for _ in range(40):
        rt.record(5)
    assert rt.round_ms(100, 300) == 100


@given(st.lists(st.integers(min_value=-5, max_value=100_000), max_size=50),
       st.integers(min_value=1, max_value=1_000), st.integers(min_value=0, max_value=5_000))
def test_the_round_length_is_always_within_its_bounds(samples, floor, extra):
    rt = RoundTrips()
    for s in samples:
        rt.record(s)
    cap = floor + extra
    assert floor <= rt.round_ms(floor, cap) <= cap
    seen = [s for s in samples if s >= 0]
    if seen:
        assert rt.slowest_ms >= seen[-1]          # the latest answer is never under-estimated
