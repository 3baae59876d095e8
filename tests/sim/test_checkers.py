"""The checkers themselves, fed known-good and known-bad histories and logs: each bad one must be caught."""

from dledger.core import Role, RoleChange
from dledger.core.node import Ready
from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.sim.checkers import StorageIdentity
from dledger.sim import InvariantChecker, LogEntry, Operation, check_commit_log, check_logs, check_reads
from dledger.store import DLedgerMemoryStore


def log_of(*bodies, term=1):
    return [LogEntry(i, term, i * 100, 1, b) for i, b in enumerate(bodies)]


def ok(op_id, body, index, invoke, complete, term=1):
    return Operation(op_id, body, "n0", invoke, complete, 200, index, term, index * 100)


def test_a_consistent_history_passes():
    ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 5, 20), ok(2, b"c", 2, 21, 30)]
    assert check_commit_log(ops, log_of(b"a", b"b", b"c")) == []


def test_acknowledged_append_missing_from_the_log_is_caught():
    ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 11, 20)]
    problems = check_commit_log(ops, log_of(b"a"))
    assert any("not in the committed log" in p for p in problems)


def test_acknowledged_append_with_other_bytes_at_its_index_is_caught():
    problems = check_commit_log([ok(0, b"a", 0, 0, 10)], log_of(b"z"), strict=False)
    assert any("holds" in p for p in problems)


def test_wrong_position_in_an_ack_is_caught():
    op = ok(0, b"a", 0, 0, 10)
    op.pos = 7
    assert any("term/pos" in p for p in check_commit_log([op], log_of(b"a")))


def test_two_acks_at_one_index_are_caught():
    ops = [ok(0, b"a", 0, 0, 10), ok(1, b"a", 0, 0, 10)]
    assert any("both acknowledged" in p for p in check_commit_log(ops, log_of(b"a")))


def test_real_time_order_violation_is_caught():
    # A acknowledged at 10, B invoked at 20, but B got the smaller index
    ops = [ok(0, b"a", 1, 0, 10), ok(1, b"b", 0, 20, 30)]
    problems = check_commit_log(ops, log_of(b"b", b"a"))
    assert any("acknowledged before" in p for p in problems)


def test_concurrent_appends_may_take_either_order():
    ops = [ok(0, b"a", 1, 0, 30), ok(1, b"b", 0, 5, 20)]
    assert check_commit_log(ops, log_of(b"b", b"a")) == []


def test_a_timed_out_append_may_appear_once_but_not_twice():
    info = Operation(0, b"t", "n0", 0, 50, 502)
    assert check_commit_log([info], log_of(b"t")) == []
    assert check_commit_log([info], []) == []
    assert any("2 times" in p for p in check_commit_log([info], log_of(b"t", b"t")))


def test_a_failed_append_must_not_appear():
    failed = Operation(0, b"f", "n1", 0, 1, 404)
    assert any("failed append" in p for p in check_commit_log([failed], log_of(b"f")))


def test_phantom_entries_are_caught_in_strict_mode():
    assert any("no client appended" in p for p in check_commit_log([], log_of(b"ghost")))
    assert check_commit_log([], log_of(b"ghost"), strict=False) == []


def test_two_leaders_in_one_term_are_caught():
    c = InvariantChecker()
    c.observe("n0", 1, 5, Ready(role_changes=[RoleChange(3, Role.LEADER, "n0")]), -1)
    c.observe("n1", 1, 6, Ready(role_changes=[RoleChange(3, Role.LEADER, "n1")]), -1)
    assert any("I1" in p for p in c.problems)


def test_commit_index_going_back_or_beyond_the_log_is_caught():
    c = InvariantChecker()
    c.observe("n0", 1, 5, Ready(committed_index=4), 9)
    c.observe("n0", 1, 6, Ready(committed_index=3), 9)
    c.observe("n0", 1, 7, Ready(committed_index=12), 9)
    assert sum("I6" in p for p in c.problems) == 2
    c.observe("n0", 2, 8, Ready(committed_index=0), 9)     # a new process lifetime starts over
    assert sum("I6" in p for p in c.problems) == 2


def _store(*terms_bodies):
    s = DLedgerMemoryStore(data_file_size=1 << 16)
    for term, body in terms_bodies:
        s.persist_term(term, None)
        s.batch_append_as_leader([body])
    return s


def test_divergent_committed_prefixes_are_caught():
    a = _store((1, b"x"), (1, b"y"))
    b = _store((1, b"x"), (2, b"z"))
    assert check_logs({"a": a, "b": b}, {"a": 1, "b": 1})
    assert check_logs({"a": a, "b": b}, {"a": 0, "b": 0}) == []     # uncommitted tails may differ


def test_same_index_and_term_with_different_bytes_breaks_log_matching():
    a = _store((1, b"x"), (1, b"y"))
    b = _store((1, b"q"), (1, b"y"))
    assert any("I2" in p for p in check_logs({"a": a, "b": b}, {"a": -1, "b": -1}))


# -- the read checker --------------------------------------------------------------------
def read(op_id, mode, index, invoke, complete, code=200):
    return Operation(op_id, b"", "n0", invoke, complete, code, index, kind="read", mode=int(mode))


def test_reads_that_see_every_earlier_acknowledged_append_pass():
    ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 5, 20),
           read(2, ReadMode.READ_INDEX_READ, 0, 15, 16),     # b not acknowledged yet when invoked
           read(3, ReadMode.RAFT_LOG_READ, 2, 21, 30), read(4, ReadMode.LEASE_READ, 1, 21, 22)]
    assert check_reads(ops, log_of(b"a", b"b", b"")) == []


def test_a_stale_linearizable_read_is_caught_in_every_linearizable_mode():
    for mode in (ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ):
        ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 5, 20), read(2, mode, 0, 21, 25)]
        problems = check_reads(ops, log_of(b"a", b"b"))
        assert len(problems) == 1 and "stale read" in problems[0], mode


def test_an_unsafe_read_may_be_stale_and_a_failed_read_is_not_checked():
    ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 5, 20), read(2, ReadMode.UNSAFE_READ, 0, 21, 25),
           read(3, ReadMode.READ_INDEX_READ, -1, 21, 25, code=int(Code.NOT_LEADER))]
    assert check_reads(ops, log_of(b"a", b"b")) == []


def test_a_read_beyond_the_committed_log_is_caught_in_any_mode():
    ops = [ok(0, b"a", 0, 0, 10), read(1, ReadMode.UNSAFE_READ, 3, 11, 12)]
    assert any("beyond the agreed committed log" in p for p in check_reads(ops, log_of(b"a")))


def test_reads_do_not_count_as_appends_for_the_commit_log_checker():
    ops = [ok(0, b"a", 0, 0, 10), read(1, ReadMode.RAFT_LOG_READ, 1, 11, 12)]
    assert check_commit_log(ops, log_of(b"a")) == []      # the read's index 1 is no acknowledged append


class _Log:
    """A replica's store as the storage-identity checker reads it."""

    def __init__(self, records, begin=-1):
        self.records = list(records)
        self.ledger_before_begin_index = begin

    def get_raw(self, index):
        raw = self.records[index]
        if raw is None:
            raise ValueError(f"entry {index} is corrupt")
        return raw


def _records(*bodies, term=1):
    from dledger.entry import DLedgerEntry, encode
    return [encode(DLedgerEntry(index=i, term=term, pos=i * 100, body=b)) for i, b in enumerate(bodies)]


def test_storage_identity_reports_a_divergence_at_the_step_it_commits():
    problems = []
    ident = StorageIdentity(problems)
    ident.observe("n0", 1, 10, 1, _Log(_records(b"a", b"b")))
    ident.observe("n1", 1, 20, 0, _Log(_records(b"a", b"z")))
    assert problems == []                              # n1 has not committed index 1 yet
    ident.observe("n1", 1, 30, 1, _Log(_records(b"a", b"z")))
    assert len(problems) == 1 and problems[0].startswith("I4 at 30ms: n1 committed index 1")
    ident.observe("n1", 1, 40, 1, _Log(_records(b"a", b"z")))
    assert len(problems) == 1                          # reported once


def test_storage_identity_checks_a_restarted_process_again_from_its_log_start():
    problems = []
    ident = StorageIdentity(problems)
    ident.observe("n0", 1, 10, 1, _Log(_records(b"a", b"b")))
    ident.observe("n1", 1, 20, 1, _Log(_records(b"a", b"b")))
    # n1's next process holds other bytes at index 0 (lost, then written again differently)
    ident.observe("n1", 2, 30, 1, _Log(_records(b"x", b"b")))
    assert any("n1 committed index 0" in p for p in problems)


def test_storage_identity_waits_for_a_damaged_entry_and_skips_what_retention_removed():
    problems = []
    ident = StorageIdentity(problems)
    ident.observe("n0", 1, 10, 2, _Log(_records(b"a", b"b", b"c")))
    damaged = _Log(_records(b"a", b"b", b"c"))
    damaged.records[1] = None
    ident.observe("n1", 1, 20, 2, damaged)             # refused read: not a divergence, checked later
    assert problems == [] and ident.checked[("n1", 1)] == 0
    ident.observe("n1", 1, 30, 2, _Log(_records(b"a", b"b", b"q")))
    assert any("n1 committed index 2" in p for p in problems)
    ident.observe("n2", 1, 40, 2, _Log(_records(b"?", b"?", b"c"), begin=1))
    assert not any("n2" in p for p in problems)        # indexes 0 and 1 are below its log start


def get(op_id, mode, index, invoke, complete, code=200, body=b"", term=1):
    return Operation(op_id, body, "n0", invoke, complete, code, index, term if code == 200 else -1,
                     index * 100 if code == 200 else -1, kind="get", mode=int(mode))


def test_a_get_reported_missing_after_its_entry_was_acknowledged_is_stale_in_every_linearizable_mode():
    for mode in (ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ):
        ops = [ok(0, b"a", 0, 0, 10), ok(1, b"b", 1, 5, 20),
               get(2, mode, 1, 21, 25, code=int(Code.INDEX_OUT_OF_RANGE)),
               get(3, mode, 2, 21, 25, code=int(Code.INDEX_OUT_OF_RANGE)),          # truly beyond: fine
               get(4, mode, 1, 20, 25, code=int(Code.INDEX_OUT_OF_RANGE))]          # concurrent: fine
        problems = check_reads(ops, log_of(b"a", b"b"))
        assert len(problems) == 1 and "stale get" in problems[0] and "op#2" in problems[0], mode


def test_an_unsafe_get_may_report_an_entry_missing_but_no_get_may_return_another_entry():
    ops = [ok(0, b"a", 0, 0, 10), get(1, ReadMode.UNSAFE_READ, 0, 11, 12, code=int(Code.INDEX_OUT_OF_RANGE)),
           get(2, ReadMode.UNSAFE_READ, 0, 11, 12, body=b"a"), get(3, ReadMode.READ_INDEX_READ, 0, 11, 12, body=b"a"),
           get(4, ReadMode.READ_INDEX_READ, 0, 11, 12, code=int(Code.NOT_LEADER))]
    assert check_reads(ops, log_of(b"a")) == []
    wrong = [ok(0, b"a", 0, 0, 10), get(1, ReadMode.UNSAFE_READ, 0, 11, 12, body=b"z")]
    assert any("returned b'z'" in p for p in check_reads(wrong, log_of(b"a")))
    beyond = [ok(0, b"a", 0, 0, 10), get(1, ReadMode.READ_INDEX_READ, 3, 11, 12, body=b"a")]
    assert any("beyond the agreed committed log" in p for p in check_reads(beyond, log_of(b"a")))


def test_gets_do_not_count_as_appends():
    ops = [ok(0, b"a", 0, 0, 10), get(1, ReadMode.READ_INDEX_READ, 0, 11, 12, body=b"a")]
    assert check_commit_log(ops, log_of(b"a")) == []      # body b"a" is in the log once, appended once
