"""DLedgerServers over real TCP on 127.0.0.1 (ephemeral ports), in one process: the default
transport of ``DLedgerServer(config)``. Every wait is on an event or a future with a timeout."""

import pytest

from dledger import DLedgerServer
from dledger.protocol import DLedgerResponseCode as Code
from dledger.transport import EndpointInUseError
from dledger.transport.tcp import TcpNetwork, TcpTransport

from transport.tcp_helpers import WAIT, TcpGroup, free_ports, when


@pytest.fixture
def tcp_group(tmp_path):
    g = TcpGroup(tmp_path).start_all()
    yield g
    g.stop_all()


def test_three_servers_over_tcp_elect_replicate_and_commit_on_every_replica(tcp_group):
    g = tcp_group
    assert all(isinstance(s._transport, TcpTransport) for s in g.servers.values())
    lead = g.leader()
    rs = [f.result(WAIT) for f in [lead.append(b"tcp-%d" % i) for i in range(50)]]
    assert [r.code for r in rs] == [Code.SUCCESS] * 50 and rs[-1].index == 49
    for s in g.servers.values():
        assert when(s, lambda s: s.node.committed_index >= 49).wait(WAIT), s.metadata()
        assert s.get(49).body == b"tcp-49" and s.get(0).pos == lead.get(0).pos


def test_a_follower_killed_and_restarted_on_the_same_port_is_reconnected_and_catches_up(tcp_group):
    g = tcp_group
    lead = g.leader()
    assert lead.append(b"before").result(WAIT).code == Code.SUCCESS
    victim_id = next(i for i, s in g.servers.items() if s is not lead)
    g.servers[victim_id].shutdown()              # its port closes with it
    for i in range(10):                          # a quorum of two still commits
        assert lead.append(b"while-down-%d" % i).result(WAIT).code == Code.SUCCESS
    back = g.start(victim_id)                    # same config: same port, same store directory
    end = lead.append(b"after").result(WAIT).index
    assert when(back, lambda s: s.node.committed_index >= end).wait(WAIT), back.metadata()
    assert back.get(end).body == b"after" and back.get(3).body == b"while-down-2"
    assert lead._transport.links[victim_id].connects >= 2      # the leader's link re-opened


def test_a_killed_leader_is_replaced_over_tcp(tcp_group):
    g = tcp_group
    lead = g.leader()
    lead.append(b"x").result(WAIT)
    g.leader_elected.clear()
    lead.shutdown()
    new = g.leader()
    assert new is not lead and new.append(b"after failover").result(WAIT).code == Code.SUCCESS


def test_two_groups_share_one_listening_port_per_node(tmp_path):
    ports = free_ports(3)
    a = TcpGroup(tmp_path, group="a", ports=ports).start_all()
    b = TcpGroup(tmp_path, group="b", ports=ports, runtime=a.runtime).start_all()
    try:
        for g in (a, b):
            lead = g.leader()
            r = lead.append(g.group.encode()).result(WAIT)
            assert r.code == Code.SUCCESS
            assert lead.get(r.index).body == g.group.encode()
        nets = {s._transport.network for g in (a, b) for s in g.servers.values()}
        assert len(nets) == 3 and {n.port for n in nets} == set(ports)
        for net in nets:
            assert set(net.endpoints) in ({("a", i), ("b", i)} for i in ("n0", "n1", "n2"))
    finally:
        b.stop_all(close_runtime=False)
        a.stop_all()


def test_the_last_endpoint_closing_frees_the_port(tmp_path):
    g = TcpGroup(tmp_path, n=1).start_all()
    try:
        assert g.leader().append(b"solo").result(WAIT).code == Code.SUCCESS
    finally:
        g.stop_all(close_runtime=False)
    assert ("127.0.0.1", g.ports[0]) not in TcpNetwork._networks
    again = TcpGroup(tmp_path, n=1, ports=g.ports, runtime=g.runtime).start_all()
    try:
        assert again.leader().append(b"again").result(WAIT).index == 1
    finally:
        again.stop_all()


def test_two_servers_with_the_same_group_and_id_in_one_process_refuse_to_start(tmp_path):
    g = TcpGroup(tmp_path, n=1, store_type="memory").start_all()
    try:
        twin = DLedgerServer(g.config("n0"), runtime=g.runtime)
        with pytest.raises(EndpointInUseError, match="already running"):
            twin.startup()
        assert not twin.started
        assert g.leader().append(b"still serving").result(WAIT).code == Code.SUCCESS
    finally:
        g.stop_all()


def test_the_in_process_transport_is_still_chosen_by_config(tmp_path):
    g = TcpGroup(tmp_path, n=1, store_type="memory", transport="inproc").start_all()
    try:
        assert not isinstance(g.servers["n0"]._transport, TcpTransport)
        assert g.leader().append(b"inproc").result(WAIT).code == Code.SUCCESS
    finally:
        g.stop_all()


def test_appends_larger_than_the_frame_limit_together_are_pushed_in_frames_that_fit(tmp_path):
    """With a frame limit just above one push, a burst of appends many times the limit is
    split into pushes that each fit one frame, and every replica gets every entry."""
    frame = 256 * 1024 + 64 * 1024
    g = TcpGroup(tmp_path, max_frame_bytes=frame, max_batch_append_size=256 * 1024,
                 mapped_file_size_for_entry_data=256 * 1024).start_all()
    try:
        lead = g.leader()
        body = bytes(range(256)) * 64                       # 16 KiB
        futures = [lead.batch_append([body] * 8) for _ in range(16)]   # 2 MiB: 7 frame limits
        assert [f.result(WAIT).code for f in futures] == [Code.SUCCESS] * 16
        end = lead.store.ledger_end_index
        assert end >= 127
        for s in g.servers.values():
            assert s._transport.network.options.max_frame_bytes == frame
            assert when(s, lambda s: s.node.committed_index >= end).wait(WAIT), s.metadata()
            assert s.get(end).body == body
        assert lead._transport.unsendable == 0              # no push was too large to send
    finally:
        g.stop_all()
