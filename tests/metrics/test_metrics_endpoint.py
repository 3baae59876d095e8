"""The metrics endpoint scraped over HTTP (127.0.0.1, a port the system picks): names, labels and
values after appends on the in-process transport and over TCP, two groups on one endpoint, the
state machine's apply histogram, and a server attached after it started. Every wait is bounded."""

import sys

import pytest

from dledger import DLedgerClient, DLedgerServer
from dledger.core import Role
from dledger.metrics import MetricsPortError, serve
from dledger.protocol import DLedgerResponseCode as Code

from metrics.helpers import HEARTBEAT_MS, IDS, WAIT, InprocCluster, scrape, scrape_until, value
from transport.tcp_helpers import TcpGroup, free_ports


@pytest.fixture
def cluster():
    c = InprocCluster()
    endpoint = serve(0, c.servers.values(), host="127.0.0.1")
    c.start()
    yield c, endpoint
    endpoint.close()
    c.close()


def settled(leader_id: str, end: int, group: str = "g"):
    """Every node holds, commits and applies ``end``, and the leader sees no follower lag."""
    def check(samples) -> bool:
        try:
            return all(value(samples, name, group=group, node=n) == end for n in IDS
                       for name in ("dledger_ledger_end_index", "dledger_committed_index", "dledger_applied_index")) \
                and all(value(samples, "dledger_peer_lag_entries", group=group, node=leader_id, peer=p) == 0
                        for p in IDS if p != leader_id)
        except KeyError:
            return False
    return check


def test_a_scrape_after_appends_shows_term_indexes_counts_latencies_and_no_lag_once_committed(cluster):
    c, endpoint = cluster
    lead = c.leader()
    lid = lead.config.self_id
    bodies = [b"x" * (10 + i) for i in range(20)]
    assert all(lead.append(b).result(WAIT).code == Code.SUCCESS for b in bodies)
    batch = [b"y" * 100] * 8
    assert lead.batch_append(batch).result(WAIT).code == Code.SUCCESS
    end = len(bodies) + len(batch) - 1
    s = scrape_until(endpoint.url, settled(lid, end))
    assert settled(lid, end)(s), s
    term = lead.node.term
    for n in IDS:
        assert value(s, "dledger_term", group="g", node=n) == term
        assert value(s, "dledger_entries", group="g", node=n) == end + 1
        assert value(s, "dledger_commit_lag_entries", group="g", node=n) == 0
        assert value(s, "dledger_halted", group="g", node=n) == 0
        for role in ("leader", "follower", "candidate"):
            expected = 1 if role == ("leader" if n == lid else "follower") else 0
            assert value(s, "dledger_role", group="g", node=n, role=role) == expected
    assert value(s, "dledger_appended_entries_total", group="g", node=lid) == end + 1
    assert value(s, "dledger_appended_bytes_total", group="g", node=lid) == sum(map(len, bodies)) + 800
    requests = len(bodies) + 1
    assert value(s, "dledger_append_entry_latency_seconds_count", group="g", node=lid) == requests
    assert value(s, "dledger_append_entry_latency_seconds_bucket", group="g", node=lid, le="+Inf") == requests
    assert 0 < value(s, "dledger_append_entry_latency_seconds_sum", group="g", node=lid) < requests * WAIT
    assert value(s, "dledger_append_entry_batch_entries_count", group="g", node=lid) == requests
    assert value(s, "dledger_append_entry_batch_entries_bucket", group="g", node=lid, le="1.0") == len(bodies)
    assert value(s, "dledger_append_entry_batch_entries_bucket", group="g", node=lid, le="8.0") == requests
    assert value(s, "dledger_append_entry_batch_bytes_sum", group="g", node=lid) == sum(map(len, bodies)) + 800
    for p in IDS:
        if p != lid:
            assert value(s, "dledger_peer_match_index", group="g", node=lid, peer=p) == end
            assert value(s, "dledger_replicate_entry_batch_entries_sum", group="g", node=lid, peer=p) >= end + 1
            pushes = value(s, "dledger_replicate_entry_latency_seconds_count", group="g", node=lid, peer=p)
            assert pushes >= 1
            assert value(s, "dledger_replicate_entry_batch_bytes_sum", group="g", node=lid, peer=p) \
                >= sum(map(len, bodies)) + 800 + 48 * (end + 1)      # encoded records: header + body
    followers = [n for n in IDS if n != lid]
    for n in followers:             # a follower appends nothing for clients and has no peer lag
        assert value(s, "dledger_appended_entries_total", group="g", node=n) == 0
        assert ("dledger_peer_lag_entries", frozenset({"group": "g", "node": n, "peer": lid}.items())) not in s


def test_latency_buckets_are_javas_in_seconds_and_cumulative(cluster):
    c, endpoint = cluster
    lead = c.leader()
    for i in range(5):
        lead.append(b"%d" % i).result(WAIT)
    s = scrape(endpoint.url)
    lid = lead.config.self_id
    les = sorted(float(dict(k[1])["le"]) for k in s if k[0] == "dledger_append_entry_latency_seconds_bucket"
                 and dict(k[1])["node"] == lid)
    assert les[0] == 1e-06 and les[-2] == 10.0 and les[-1] == float("inf") and len(les) == 24
    counts = [value(s, "dledger_append_entry_latency_seconds_bucket", group="g", node=lid, le=repr(le))
              if le != float("inf") else
              value(s, "dledger_append_entry_latency_seconds_bucket", group="g", node=lid, le="+Inf") for le in les]
    assert counts == sorted(counts) and counts[-1] == 5


def test_two_groups_in_one_process_share_one_endpoint_labelled_by_group():
    c = InprocCluster(groups=("orders", "audit"))
    endpoint = serve(0, c.servers.values(), host="127.0.0.1")
    try:
        c.start()
        a, b = c.leader("orders"), c.leader("audit")
        for i in range(3):
            assert a.append(b"o").result(WAIT).code == Code.SUCCESS
        assert b.append(b"a").result(WAIT).code == Code.SUCCESS
        s = scrape_until(endpoint.url, lambda s: settled(a.config.self_id, 2, "orders")(s)
                         and settled(b.config.self_id, 0, "audit")(s))
        assert value(s, "dledger_appended_entries_total", group="orders", node=a.config.self_id) == 3
        assert value(s, "dledger_appended_entries_total", group="audit", node=b.config.self_id) == 1
        assert {dict(k[1])["group"] for k in s if k[0] == "dledger_term"} == {"orders", "audit"}
        assert sum(1 for k in s if k[0] == "dledger_term") == 6
    finally:
        endpoint.close()
        c.close()


class Counting:
    def __init__(self) -> None:
        self.applied = 0

    def on_apply(self, entries) -> None:
        self.applied += len(entries)

    def on_shutdown(self) -> None:
        pass


def test_the_state_machine_apply_is_timed_and_batches_counted():
    c = InprocCluster(state_machine=Counting)
    endpoint = serve(0, c.servers.values(), host="127.0.0.1")
    try:
        c.start()
        lead = c.leader()
        assert lead.batch_append([b"k"] * 5).result(WAIT).code == Code.SUCCESS
        s = scrape_until(endpoint.url, lambda s: all(
            value(s, "dledger_apply_task_batch_entries_sum", group="g", node=n) == 5 for n in IDS))
        for n in IDS:
            assert value(s, "dledger_apply_task_batch_entries_sum", group="g", node=n) == 5
            assert value(s, "dledger_apply_task_latency_seconds_count", group="g", node=n) >= 1
        assert lead.node.caller.state_machine.applied == 5       # the host's object is still reached
    finally:
        endpoint.close()
        c.close()


def test_a_server_attached_after_startup_is_measured_from_then_on():
    c = InprocCluster().start()
    try:
        lead = c.leader()
        assert lead.append(b"before").result(WAIT).code == Code.SUCCESS
        with serve(0, c.servers.values(), host="127.0.0.1") as endpoint:
            assert lead.append(b"after").result(WAIT).code == Code.SUCCESS
            s = scrape_until(endpoint.url, settled(lead.config.self_id, 1))
            lid = lead.config.self_id
            assert value(s, "dledger_appended_entries_total", group="g", node=lid) == 1
            assert value(s, "dledger_ledger_end_index", group="g", node=lid) == 1
    finally:
        c.close()


def test_appends_from_a_client_over_tcp_are_measured_on_the_leader(tmp_path):
    g = TcpGroup(tmp_path, heart_beat_time_interval_ms=HEARTBEAT_MS)
    endpoint = serve(0, host="127.0.0.1")
    try:
        for node_id in g.ids:
            s = DLedgerServer(g.config(node_id), runtime=g.runtime)
            s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and g.leader_elected.set())
            endpoint.add(s)
            g.servers[node_id] = s.startup()
        lead = g.leader()
        with DLedgerClient(g.peers, g.group, timeout_s=WAIT) as client:
            for body in (b"one", b"three"):
                assert client.append(body).index >= 0
            assert client.batch_append([b"ab", b"cd"]).index == 3
        lid = lead.config.self_id
        s = scrape_until(endpoint.url, settled(lid, 3, g.group))
        assert value(s, "dledger_appended_entries_total", group=g.group, node=lid) == 4
        assert value(s, "dledger_appended_bytes_total", group=g.group, node=lid) == 12
        assert value(s, "dledger_append_entry_latency_seconds_count", group=g.group, node=lid) == 3
        assert settled(lid, 3, g.group)(s)
    finally:
        endpoint.close()
        g.stop_all()


def test_a_port_in_use_or_out_of_range_is_refused_with_the_reason():
    port = free_ports(1)[0]
    with serve(port, host="127.0.0.1"):
        with pytest.raises(MetricsPortError, match=f"127.0.0.1:{port}"):
            serve(port, host="127.0.0.1")
    for bad in (-1, 65536, "9100", True):
        with pytest.raises(ValueError, match="0 to 65535"):
            serve(bad, host="127.0.0.1")


def test_each_endpoint_has_its_own_registry():
    c = InprocCluster().start()
    try:
        lead = c.leader()
        with serve(0, [lead], host="127.0.0.1") as one, serve(0, host="127.0.0.1") as other:
            lead.append(b"x").result(WAIT)
            assert ("dledger_term", frozenset({"group": "g", "node": lead.config.self_id}.items())) in scrape(one.url)
            assert not any(k[0] == "dledger_term" for k in scrape(other.url))
    finally:
        c.close()


def test_leader_changes_count_each_new_leader_a_node_comes_to_know():
    from dledger.core import RoleChange, RoleEvent
    from dledger.metrics import NodeMetrics

    m = NodeMetrics("g", "n0")
    changes = [(Role.CANDIDATE, None, 0), (Role.FOLLOWER, "n1", 1), (Role.CANDIDATE, None, 1),
               (Role.FOLLOWER, "n1", 2), (Role.CANDIDATE, None, 2), (Role.LEADER, "n0", 3),
               (Role.FOLLOWER, "n2", 4)]
    for term, (role, leader, expected) in enumerate(changes):
        m.on_role_change(RoleChange(term, role, leader, RoleEvent.START))
        assert m.leader_changes == expected, (role, leader)


def test_has_leader_leader_changes_build_info_and_the_process_collectors_are_scraped(cluster):
    import platform

    from dledger import __version__

    c, endpoint = cluster
    lead = c.leader()
    s = scrape_until(endpoint.url, lambda s: all(
        s.get(("dledger_has_leader", frozenset({"group": "g", "node": n}.items()))) == 1 for n in IDS))
    before = {n: value(s, "dledger_leader_changes_total", group="g", node=n) for n in IDS}
    assert all(value(s, "dledger_has_leader", group="g", node=n) == 1 for n in IDS)
    assert all(count >= 1 for count in before.values()), before
    assert value(s, "dledger_build_info", version=__version__, python=platform.python_version()) == 1
    assert value(s, "process_resident_memory_bytes") > 0 and value(s, "process_open_fds") > 0
    assert value(s, "process_cpu_seconds_total") > 0 and value(s, "process_start_time_seconds") > 0
    assert value(s, "python_gc_collections_total", generation="0") >= 0
    assert ("python_info", frozenset({"implementation": platform.python_implementation(),
                                      "major": str(sys.version_info.major), "minor": str(sys.version_info.minor),
                                      "patchlevel": str(sys.version_info.micro),
                                      "version": platform.python_version()}.items())) in s
    target = next(n for n in IDS if n != lead.config.self_id)
    assert lead.transfer_leadership(target).result(WAIT).code == Code.SUCCESS
    s = scrape_until(endpoint.url, lambda s: all(
        value(s, "dledger_leader_changes_total", group="g", node=n) > before[n] for n in IDS))
    assert all(value(s, "dledger_leader_changes_total", group="g", node=n) > before[n] for n in IDS), s
    assert value(s, "dledger_role", group="g", node=target, role="leader") == 1


class Snapshotting:
    def __init__(self):
        self.total = 0

    def on_apply(self, entries):
        self.total += len(entries)

    def on_snapshot_save(self, writer):
        writer.write(str(self.total).encode())

    def on_snapshot_load(self, reader):
        self.total = int(reader.read())


def test_snapshots_are_counted_and_their_index_shown(tmp_path):
    from dledger import DLedgerConfig
    from dledger.runtime.asyncio_runtime import AsyncioRuntime
    port = free_ports(1)[0]
    rt = AsyncioRuntime()
    server = DLedgerServer(DLedgerConfig(group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}",
                                         store_base_dir=str(tmp_path)), runtime=rt, state_machine=Snapshotting())
    endpoint = serve(0, [server], host="127.0.0.1")
    try:
        server.startup()
        assert server.wait_for_leader(WAIT) == "n0"
        s = scrape(endpoint.url)
        assert value(s, "dledger_snapshot_index", group="g", node="n0") == -1
        assert value(s, "dledger_snapshots_taken_total", group="g", node="n0") == 0
        for _ in range(3):
            assert server.append(b"x").result(WAIT).ok
        index = server.snapshot().result(WAIT)
        s = scrape(endpoint.url)
        assert value(s, "dledger_snapshot_index", group="g", node="n0") == index == 2
        assert value(s, "dledger_snapshots_kept", group="g", node="n0") == 1
        assert value(s, "dledger_snapshots_taken_total", group="g", node="n0") == 1
        assert value(s, "dledger_snapshots_installed_total", group="g", node="n0") == 0
        assert value(s, "dledger_waits_for_snapshot", group="g", node="n0") == 0
    finally:
        endpoint.close()
        server.shutdown()
        rt.close()
