"""The POP state of the gRPC v2 endpoint, as a pure class: receive, ack, change of invisible
duration and redelivery, and records written from a stale view changing nothing."""

import pytest

from dledger.broker.grpc_v2.pop_state import Inflight, PopState, handle, parse_handle


def receive(state, parts, deadline=1000, g="G", t="T"):
    return state.apply({"op": "receive", "g": g, "t": t, "deadline": deadline, "parts": parts})


def part(q=0, start=0, end=0, new=(), again=()):
    return {"q": q, "from": start, "to": end, "new": list(new), "again": [list(a) for a in again]}


def test_a_receive_hands_out_new_messages_and_moves_the_cursor():
    s = PopState()
    assert s.cursor("G", "T", 0) is None
    assert receive(s, [part(0, 0, 3, [0, 1, 2])]) == [(0, 0, 1, 1), (0, 1, 1, 1), (0, 2, 1, 1)]
    assert s.cursor("G", "T", 0) == 3
    assert s.inflight("G", "T", 0, 1) == Inflight(1000, 1, 1)
    assert s.cursor("other", "T", 0) is None and s.cursor("G", "T", 1) is None


def test_filtered_out_messages_move_the_cursor_without_being_in_flight():
    s = PopState()
    assert receive(s, [part(0, 0, 4, [1, 3])]) == [(0, 1, 1, 1), (0, 3, 1, 1)]
    assert s.cursor("G", "T", 0) == 4 and s.inflight("G", "T", 0, 0) is None


def test_an_ack_with_the_current_handle_removes_the_message_once():
    s = PopState()
    receive(s, [part(0, 0, 1, [0])])
    assert s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 2}) is False
    assert s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1}) is True
    assert s.inflight("G", "T", 0, 0) is None
    assert s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1}) is False


def test_an_unacked_message_is_handed_out_again_after_its_deadline_with_the_attempt_counted_up():
    s = PopState()
    receive(s, [part(0, 0, 2, [0, 1])], deadline=1000)
    assert s.expired("G", "T", 0, 999, 10) == []
    assert s.expired("G", "T", 0, 1000, 10) == [(0, 1), (1, 1)]
    assert s.expired("G", "T", 0, 1000, 1) == [(0, 1)]
    assert s.next_deadline("G", "T", [0, 1]) == 1000
    assert receive(s, [part(0, 2, 2, again=[(0, 1)])], deadline=5000) == [(0, 0, 2, 2)]
    assert s.inflight("G", "T", 0, 0) == Inflight(5000, 2, 2)
    # the old handle no longer acks; the new one does
    assert s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1}) is False
    assert s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 2}) is True


def test_a_change_of_invisible_duration_makes_a_new_handle():
    s = PopState()
    receive(s, [part(0, 0, 1, [0])], deadline=1000)
    assert s.apply({"op": "change", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1, "deadline": 9000}) == 2
    assert s.inflight("G", "T", 0, 0) == Inflight(9000, 1, 2)
    assert s.apply({"op": "change", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1, "deadline": 1}) is None
    assert s.expired("G", "T", 0, 5000, 10) == []


def test_records_from_a_stale_view_change_nothing_they_should_not():
    s = PopState()
    receive(s, [part(0, 0, 2, [0, 1])])
    # a second receive planned from the same cursor: its new messages are not granted again
    assert receive(s, [part(0, 0, 2, [0, 1])]) == []
    assert s.cursor("G", "T", 0) == 2
    # a redelivery racing an ack: the ack won, the redelivery grants nothing
    s.apply({"op": "ack", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1})
    assert receive(s, [part(0, 2, 2, again=[(0, 1), (1, 1)])], deadline=2000) == [(0, 1, 2, 2)]
    assert s.inflight("G", "T", 0, 0) is None


def test_every_replica_applying_the_same_records_has_the_same_state():
    records = [{"op": "receive", "g": "G", "t": "T", "deadline": 10, "parts": [part(0, 0, 3, [0, 1, 2]), part(1, 0, 1, [0])]},
               {"op": "ack", "g": "G", "t": "T", "q": 0, "o": 1, "seq": 1},
               {"op": "receive", "g": "G", "t": "T", "deadline": 20, "parts": [part(0, 3, 3, again=[(0, 1)])]},
               {"op": "change", "g": "G", "t": "T", "q": 1, "o": 0, "seq": 1, "deadline": 99}]
    a, b = PopState(), PopState()
    for r in records:
        a.apply(r)
        b.apply(r)
    assert a.queues == b.queues
    assert a.inflight("G", "T", 0, 0) == Inflight(20, 2, 2) and a.inflight("G", "T", 0, 2) == Inflight(10, 1, 1)


@pytest.mark.parametrize("record, words", [
    ([], "record: must be a map"),
    ({"op": "receive", "g": 1, "t": "T"}, "g: must be str"),
    ({"op": "nope", "g": "G", "t": "T"}, "op: 'nope'"),
    ({"op": "ack", "g": "G", "t": "T", "q": "0", "o": 0, "seq": 1}, "q: must be int"),
    ({"op": "change", "g": "G", "t": "T", "q": 0, "o": 0, "seq": 1}, "deadline: must be int"),
    ({"op": "receive", "g": "G", "t": "T", "deadline": 1, "parts": "x"}, "parts: must be a list"),
    ({"op": "receive", "g": "G", "t": "T", "deadline": 1, "parts": [part(0, 0, 1, [5])]}, "from..to"),
    ({"op": "receive", "g": "G", "t": "T", "deadline": 1, "parts": [{**part(), "again": [[1]]}]}, "again"),
])
def test_a_malformed_record_is_a_value_error_naming_the_field_and_changes_nothing(record, words):
    s = PopState()
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(".", r"\.")):
        s.apply(record)
    assert s.queues == {}


def test_receipt_handles_round_trip_and_bad_ones_are_named():
    assert parse_handle(handle(3, 12345, 2)) == (3, 12345, 2)
    for bad in ("", "x", "dl1:a:b:c", "dl1:1:2", "dl2:1:2:3", "dl1:-1:0:1", "dl1:0:0:0", None):
        with pytest.raises(ValueError, match="receipt_handle"):
            parse_handle(bad)
