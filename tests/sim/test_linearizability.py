"""The linearizability checker on histories whose verdict is known, and on generated ones."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from dledger.sim.linearizability import CheckResult, KVModel, Op, RegisterModel, check


def op(client, input, output, call, ret):
    return Op(client, input, output, call, ret)


def verdict(ops, model=None, **kw):
    return check(model or KVModel(), ops, **kw).result


# -- known-good -----------------------------------------------------------------------------
def test_sequential_puts_and_gets_are_linearizable():
    h = [op("a", ("put", "x", 1), None, 0, 1), op("b", ("get", "x"), 1, 2, 3),
         op("a", ("put", "x", 2), None, 4, 5), op("b", ("get", "x"), 2, 6, 7)]
    assert verdict(h) is CheckResult.OK


def test_a_read_concurrent_with_a_write_may_see_either_value():
    for seen in (None, 1):
        h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("get", "x"), seen, 5, 6)]
        assert verdict(h) is CheckResult.OK, seen


def test_concurrent_writes_may_take_effect_in_either_order():
    h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("put", "x", 2), None, 0, 10),
         op("c", ("get", "x"), 1, 20, 21)]
    assert verdict(h) is CheckResult.OK
    h[2] = op("c", ("get", "x"), 2, 20, 21)
    assert verdict(h) is CheckResult.OK


def test_an_indeterminate_write_may_take_effect_late_or_never():
    write = op("a", ("put", "x", 1), None, 0, None)          # the answer was lost
    assert verdict([write, op("b", ("get", "x"), None, 10, 20)]) is CheckResult.OK
    assert verdict([write, op("b", ("get", "x"), 1, 10, 20)]) is CheckResult.OK
    # seen before the write was even called: impossible
    assert verdict([op("a", ("put", "x", 1), None, 30, None), op("b", ("get", "x"), 1, 10, 20)]) \
        is CheckResult.ILLEGAL


def test_an_indeterminate_read_constrains_nothing():
    h = [op("a", ("put", "x", 1), None, 0, 1), op("b", ("get", "x"), "garbage", 2, None),
         op("b", ("get", "x"), 1, 3, 4)]
    assert verdict(h) is CheckResult.OK


def test_compare_and_set():
    h = [op("a", ("put", "x", 1), None, 0, 1), op("b", ("cas", "x", 1, 2), True, 2, 3),
         op("c", ("cas", "x", 1, 3), False, 4, 5), op("a", ("get", "x"), 2, 6, 7)]
    assert verdict(h) is CheckResult.OK
    h[2] = op("c", ("cas", "x", 1, 3), True, 4, 5)           # a second successful swap from 1
    assert verdict(h) is CheckResult.ILLEGAL


def test_keys_are_checked_independently():
    h = [op("a", ("put", "x", 1), None, 0, 1), op("a", ("put", "y", 5), None, 2, 3),
         op("b", ("get", "x"), 1, 4, 5), op("b", ("get", "y"), 5, 4, 5)]
    v = check(KVModel(), h)
    assert v.ok and sorted(k.key for k in v.keys) == ["x", "y"]


# -- known-bad ------------------------------------------------------------------------------
def test_a_stale_read_after_an_acknowledged_write_is_illegal():
    h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("get", "x"), None, 20, 30)]
    v = check(KVModel(), h)
    assert v.result is CheckResult.ILLEGAL
    assert "key 'x': illegal" in v.describe()


def test_values_cannot_flip_back():
    h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("put", "x", 2), None, 0, 10),
         op("c", ("get", "x"), 1, 20, 30), op("c", ("get", "x"), 2, 40, 50),
         op("c", ("get", "x"), 1, 60, 70)]
    assert verdict(h) is CheckResult.ILLEGAL


def test_a_value_never_written_is_illegal():
    h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("get", "x"), 7, 5, 30)]
    assert verdict(h) is CheckResult.ILLEGAL


def test_one_bad_key_makes_the_history_illegal_and_is_named():
    h = [op("a", ("put", "ok", 1), None, 0, 1), op("b", ("get", "ok"), 1, 2, 3),
         op("a", ("put", "bad", 1), None, 0, 1), op("b", ("get", "bad"), None, 2, 3)]
    v = check(KVModel(), h)
    assert v.result is CheckResult.ILLEGAL
    assert [k.key for k in v.keys if k.result is CheckResult.ILLEGAL] == ["bad"]


def test_register_model():
    h = [op("a", ("write", 1), None, 0, 1), op("b", ("read",), 1, 2, 3)]
    assert verdict(h, RegisterModel(0)) is CheckResult.OK
    assert verdict([op("b", ("read",), 0, 0, 1)], RegisterModel(0)) is CheckResult.OK
    assert verdict(h[:1] + [op("b", ("read",), 0, 2, 3)], RegisterModel(0)) is CheckResult.ILLEGAL


# -- bounded search -------------------------------------------------------------------------
def test_a_search_over_budget_answers_unknown_not_a_verdict():
    # many concurrent writes of distinct values and reads of a value never written: illegal,
    # but proving it takes a search far larger than the budget
    h = [op(i, ("put", "x", i), None, 0, 100) for i in range(14)]
    h.append(op("r", ("get", "x"), 99, 0, 100))
    assert verdict(h, max_steps_per_key=200) is CheckResult.UNKNOWN
    assert verdict(h[:6] + h[-1:]) is CheckResult.ILLEGAL


# -- generated histories --------------------------------------------------------------------
def _run(seed: int, n_ops: int, keys: int, clients: int, lose: float):
    """A history produced by a real linearizable execution: each operation takes effect at a
    point drawn inside its window; some answers are lost (indeterminate)."""
    rng = random.Random(seed)
    state: dict = {}
    ops = []
    t = 0.0
    for i in range(n_ops):
        t += rng.random()
        point = t
        call = point - rng.random() * 3
        ret = point + rng.random() * 3
        key = f"k{rng.randrange(keys)}"
        kind = rng.choice(["put", "get", "get", "cas"])
        if kind == "put":
            inp, out = ("put", key, i), None
            state[key] = i
        elif kind == "get":
            inp, out = ("get", key), state.get(key)
        else:
            expected = state.get(key) if rng.random() < 0.5 else -1
            swapped = state.get(key) == expected
            inp, out = ("cas", key, expected, i), swapped
            if swapped:
                state[key] = i
        lost = rng.random() < lose
        ops.append(Op(rng.randrange(clients), inp, None if lost else out, call, None if lost else ret))
    return ops


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), keys=st.integers(1, 4), lose=st.sampled_from([0, 0.1, 0.3]))
def test_every_linearizable_execution_is_accepted(seed, n, keys, lose):
    ops = _run(seed, n, keys, 5, lose)
    v = check(KVModel(), ops)
    assert v.result is CheckResult.OK, v.describe()


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(2, 60))
def test_a_read_of_a_value_never_written_is_always_caught(seed, n):
    ops = _run(seed, n, 2, 5, 0.0)
    gets = [i for i, o in enumerate(ops) if o.input[0] == "get"]
    if not gets:
        return
    i = gets[seed % len(gets)]
    o = ops[i]
    ops[i] = Op(o.client, o.input, "never-written", o.call_ms, o.return_ms)
    assert check(KVModel(), ops).result is CheckResult.ILLEGAL


def test_operations_touching_in_time_are_concurrent():
    # the read is invoked at the very instant the write returns: either order is possible
    h = [op("a", ("put", "x", 1), None, 0, 10), op("b", ("get", "x"), None, 10, 20)]
    assert verdict(h) is CheckResult.OK
