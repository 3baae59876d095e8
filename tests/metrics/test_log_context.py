"""Log records of the core, the store and the server carry the group, node id, term and (when the
message is about one) the index of the node that emitted them; records from elsewhere (another
thread, the transport, a library) get empty fields, and no record is dropped."""

import io
import logging
import threading

import pytest
from hypothesis import given, strategies as st

from dledger import DLedgerConfig, DLedgerServer
from dledger.core import Role
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.runtime.log_context import CURRENT, FORMAT, ContextFilter, LogContext, index_of
from dledger.transport.inproc import Hub

WAIT = 10.0


class Member:
    def __init__(self, term: int) -> None:
        self.curr_term = term


def record(name: str, msg: str, *args, thread=None, **extra) -> logging.LogRecord:
    r = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    r.__dict__.update(extra)
    if thread is not None:
        r.thread = thread
    return r


@pytest.fixture
def context():
    ctx = LogContext("g", "n0")
    ctx.member_state = Member(3)
    saved = CURRENT.ctx
    ctx.bind_here()
    yield ctx
    CURRENT.ctx = saved


def test_a_core_record_on_the_nodes_thread_gets_group_node_term_and_the_index_it_is_about(context):
    r = record("dledger.core.entry_pusher", "%s: cannot read entry %d for %s: %s", "n0", 17, "n1", "boom")
    assert ContextFilter().filter(r) is True
    assert (r.group, r.node, r.term, r.index) == ("g", "n0", 3, 17)
    assert r.context == "[g/n0 term 3 index 17] "
    out = logging.Formatter(FORMAT).format(r)
    assert out.endswith("WARNING dledger.core.entry_pusher [g/n0 term 3 index 17] n0: cannot read entry 17 for n1: boom")


def test_a_record_about_no_index_shows_group_node_and_term_only(context):
    r = record("dledger.server", "%s: flush failed: %s", "n0", "disk")
    ContextFilter().filter(r)
    assert r.context == "[g/n0 term 3] " and r.index is None


def test_an_index_passed_in_extra_wins(context):
    r = record("dledger.store.recovery", "something about %d things", 5, index=42)
    ContextFilter().filter(r)
    assert r.index == 42 and "index 42" in r.context


def test_before_the_node_exists_the_term_comes_from_the_store(context):
    class Store:
        current_term = 7
    context.member_state, context.store = None, Store()
    r = record("dledger.store.mmap_file_store", "store %s is suspect: %s", "d", "FRESH")
    ContextFilter().filter(r)
    assert r.context == "[g/n0 term 7] "


@pytest.mark.parametrize("name, thread", [("dledger.transport.tcp", None), ("dledger.client", None),
                                          ("somelib", None), ("dledger.core.vote", -1)])
def test_records_from_elsewhere_get_empty_fields_and_are_kept(context, name, thread):
    r = record(name, "entry %d", 3, thread=thread)
    assert ContextFilter().filter(r) is True
    assert r.context == "" and r.group is None and r.node is None and r.term is None
    assert logging.Formatter(FORMAT).format(r).endswith(f"WARNING {name} entry 3")


@given(st.lists(st.sampled_from(["%s", "%d", "%r", "%%", "x", " "]), max_size=6), st.integers(-5, 10**12))
def test_the_index_is_the_argument_of_the_entry_placeholder_whatever_comes_before(prefix, index):
    msg = "".join(prefix) + " entry %d, then %s"
    args = [("s" if p in ("%s", "%r") else 9) for p in prefix if p in ("%s", "%d", "%r")]
    r = record("dledger.core.x", msg, *args, index, "tail")
    r.getMessage()                          # the message and its arguments agree
    assert index_of(r) == index


def test_a_message_with_no_index_placeholder_has_no_index():
    assert index_of(record("dledger.core.x", "%s: relearnt its term from %d member(s)", "n0", 2)) is None
    assert index_of(record("dledger.core.x", "entry %s", "not-a-number")) is None


def test_a_running_cluster_logs_with_each_nodes_own_group_id_and_term():
    """Real servers: every node logs its recovery at startup, and the leader logs a refused
    message (a negative term); each line names the node that logged it, with its term."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(ContextFilter())
    root = logging.getLogger("dledger")
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    runtime, hub = AsyncioRuntime(), Hub()
    peers = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"
    elected = threading.Event()
    servers = []
    try:
        for node_id in ("n0", "n1", "n2"):
            s = DLedgerServer(DLedgerConfig(group="lg", self_id=node_id, peers=peers, store_type="memory",
                                            heart_beat_time_interval_ms=500),
                              runtime=runtime, hub=hub)
            s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and elected.set())
            servers.append(s.startup())
        assert elected.wait(WAIT)
        lead = next(s for s in servers if s.is_leader)
        from dledger.protocol import Envelope, VoteRequest
        bad = VoteRequest(group="lg", local_id="n9", remote_id=lead.config.self_id, term=-5)
        runtime.run_sync(lambda: lead.driver.on_envelope(Envelope("n9", lead.config.self_id, 1, False, bad)))
    finally:
        for s in servers:
            s.shutdown()
        runtime.close()
        root.removeHandler(handler)
        root.setLevel(old_level)
    lines = stream.getvalue().splitlines()
    refused = [line for line in lines if "refused VoteRequest" in line]
    assert refused, lines
    term = lead.node.term
    assert f"dledger.core.node [lg/{lead.config.self_id} term {term}] {lead.config.self_id}: refused" in refused[0]
    recovered = [line for line in lines if "recovering" in line]
    assert {line.split("[lg/")[1][:2] for line in recovered} == {"n0", "n1", "n2"}
