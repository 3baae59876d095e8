"""The answers of a batch put: the compiled ``put_results`` against ``DLedgerCommitLog._results``'
reference loop (``put_result.put_ok``): the same results (equal, same repr, same hash), the
same stamps popped; and where a stamp is missing or a value is odd, the compiled twin answers
None, pops nothing, and the reference answers (a refusal naming the entry)."""

import gc

import pytest
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker import commit_log, speedups
from dledger.broker.commit_log import DLedgerCommitLog
from dledger.broker.message_codec import message_id
from dledger.broker.put_result import PutMessageResult, PutMessageStatus
from dledger.protocol import DLedgerResponseCode as Code

compiled = speedups.compiled


def answer(positions, raws, stamped, prefix, leader, use_compiled):
    log = SimpleNamespace(_stamped=stamped, _id_prefix=prefix)
    resp = SimpleNamespace(code=Code.SUCCESS, positions=positions, leader_id=leader)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(commit_log, "_put_results", compiled.put_results if use_compiled else None)
        return DLedgerCommitLog._results(log, resp, raws)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=30), st.integers(-1, 2**40),
                                st.integers(0, 2**62)), max_size=12, unique_by=lambda t: t[0]),
       missing=st.sets(st.integers(0, 11)), host=st.sampled_from([("10.0.0.7", 10911), ("::1", 9), ("1.2.3.4", 0)]),
       leader=st.sampled_from([None, "n1", "é"]))
def test_the_compiled_answers_are_the_references(items, missing, host, leader):
    positions = [p for p, *_ in items]
    raws = [r for _, r, *_ in items]
    stamps = {p: (qo, ts) for k, (p, _r, qo, ts) in enumerate(items) if k not in missing}
    prefix = message_id(host, 0)[:-16]
    ref_stamped, fast_stamped = dict(stamps), dict(stamps)
    ref = answer(positions, raws, ref_stamped, prefix, leader, False, )
    fast = answer(positions, raws, fast_stamped, prefix, leader, True, )
    assert fast == ref
    assert [repr(r) for r in fast] == [repr(r) for r in ref]
    assert [hash(r) for r in fast] == [hash(r) for r in ref]
    assert fast_stamped == ref_stamped
    # the collector walks the compiled answers while they live (they are young: generations 0
    # and 1 hold them; a full collection of everything the suite made before cost 0.15 s a run)
    gc.collect(1)


def test_ok_answers_are_built_by_the_compiled_twin_and_are_whole_results():
    stamped = {100: (5, 1_700_000_000_000), 300: (6, 1_700_000_000_001)}
    out = compiled.put_results([100, 300], [b"a" * 200, b"b"], stamped, "0A000007000029BF", "n2", PutMessageResult,
                               PutMessageStatus.PUT_OK)
    assert stamped == {}
    assert out[0] == PutMessageResult(PutMessageStatus.PUT_OK, 148, 200, 5, "0A000007000029BF0000000000000094",
                                      1_700_000_000_000, "n2", "")
    assert out[1].ok and out[1].msg_id.endswith("000000000000015C") and out[1].wrote_bytes == 1
    assert type(out[0]) is PutMessageResult and gc.is_tracked(out[0])


def test_odd_values_leave_the_answers_to_the_reference_and_pop_nothing():
    args = ("AB", None, PutMessageResult, PutMessageStatus.PUT_OK)
    for positions, raws, stamped in (([1], [b"x"], {}), ([1], [b"x"], {1: (1,)}), ([1], [bytearray(b"x")], {1: (1, 2)}),
                                     ([-5], [b"x"], {-5: (1, 2)}), ([True], [b"x"], {True: (1, 2)}),
                                     ([1, 2], [b"x"], {1: (1, 2), 2: (3, 4)})):
        before = dict(stamped)
        assert compiled.put_results(positions, raws, stamped, *args) is None
        assert stamped == before
    assert compiled.put_results([1], [b"x"], {1: (1, 2)}, "é", None, PutMessageResult, PutMessageStatus.PUT_OK) is None
