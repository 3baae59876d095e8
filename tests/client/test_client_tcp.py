"""DLedgerClient against three DLedgerServers over real TCP on 127.0.0.1, in one process.

Every wait is on a future or an event with a timeout; the client's own timeout bounds each call.
"""

import asyncio
import threading

import pytest

from dledger import (AppendOutcomeUnknown, AsyncDLedgerClient, ClusterUnavailableError, DLedgerClient,
                     DLedgerError)
from dledger.protocol import DLedgerResponseCode as Code

from transport.tcp_helpers import WAIT, TcpGroup, free_ports, when

KEY = b"client-test-secret-0123456789"


@pytest.fixture
def tcp_group(tmp_path):
    g = TcpGroup(tmp_path).start_all()
    yield g
    g.stop_all()


def follower_only_peers(g, lead):
    """A peers string naming the followers only: every call enters through a follower."""
    return ";".join(p for p in g.peers.split(";") if not p.startswith(lead.config.self_id + "-"))


def test_append_get_and_metadata_through_a_follower_address(tcp_group):
    g = tcp_group
    lead = g.leader()
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        r = c.append(b"first")
        assert r.code == Code.SUCCESS and r.index == 0
        b = c.batch_append([b"a", b"b", b"c"])
        assert b.code == Code.SUCCESS and b.index == 3 and len(b.positions) == 3
        assert c.get(2).body == b"b" and c.get(0).body == b"first" and c.get(0).pos == r.pos
        meta = c.metadata()
        assert meta["leader_id"] == lead.config.self_id and set(meta["peers"]) == {"n0", "n1", "n2"}
        with pytest.raises(DLedgerError) as exc:
            c.get(99)
        assert exc.value.code == Code.INDEX_OUT_OF_RANGE
        status = c.status()
        assert set(status) == {"n0", "n1", "n2"} and all(s["leader_id"] == lead.config.self_id
                                                        for s in status.values())



def test_a_client_given_one_follower_address_finds_the_leader_through_it(tcp_group):
    g = tcp_group
    lead = g.leader()
    one = follower_only_peers(g, lead).split(";")[0]
    with DLedgerClient(one, "t", timeout_s=WAIT) as c:
        assert c.append(b"via-follower").code == Code.SUCCESS
        assert c.leader_id == lead.config.self_id
        assert c.get(0).body == b"via-follower"
        assert c.metadata()["leader_id"] == lead.config.self_id


def test_a_follower_answers_not_leader_with_the_hint_and_the_client_follows_it(tcp_group):
    g = tcp_group
    lead = g.leader()
    follower = next(i for i in g.ids if i != lead.config.self_id)
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        c._aio.leader_id = follower               # believes a follower leads
        r = c.append(b"x")
        assert r.code == Code.SUCCESS and c.leader_id == lead.config.self_id


def test_the_leader_killed_mid_stream_loses_no_acknowledged_append_and_reports_the_rest_as_unknown(tmp_path):
    g = TcpGroup(tmp_path).start_all()
    try:
        lead = g.leader()
        acked, unknown, unavailable = {}, [], []
        stop_at = 40

        def writer(c):
            for i in range(120):
                body = b"w-%d" % i
                if i == stop_at:
                    killed.set()
                try:
                    acked[c.append(body).index] = body
                except AppendOutcomeUnknown:
                    unknown.append(body)
                except ClusterUnavailableError:
                    unavailable.append(body)

        killed = threading.Event()
        with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
            t = threading.Thread(target=writer, args=(c,))
            t.start()
            assert killed.wait(WAIT)
            g.leader_elected.clear()
            lead.shutdown()
            t.join(60)
            assert not t.is_alive()
            new = g.leader()
            assert new is not lead
            end = new.append(b"end").result(WAIT).index
            survivors = [s for s in g.servers.values() if s.started]
            for s in survivors:
                assert when(s, lambda s: s.node.committed_index >= end).wait(WAIT)
            log = [new.get(i).body for i in range(end)]
            # every acknowledged append is present, at the index it was acknowledged at
            assert all(log[i] == body for i, body in acked.items())
            # nothing was stored twice, and nothing appeared that was not sent
            assert len(set(log)) == len(log) and set(log) <= {b"w-%d" % i for i in range(120)}
            # an append reported unavailable was certainly not taken
            assert not set(unavailable) & set(log)
            assert len(acked) >= 100 and len(acked) + len(unknown) + len(unavailable) == 120
            assert c.get(end).body == b"end"
    finally:
        g.stop_all()


def test_an_append_pending_when_the_leader_shuts_down_is_unknown_never_refused(tmp_path):
    """A leader that shuts down fails its pending appends (INTERNAL_ERROR) and sends those
    answers: the appends are in its log and on any follower that took them, so they may still
    commit. The client reports them unknown; it reported them refused (certainly not taken),
    found by the kill-mid-stream test above on a loaded machine."""
    g = TcpGroup(tmp_path, max_wait_ack_time_ms=60_000).start_all()
    try:
        lead = g.followed_leader()
        for s in g.servers.values():
            if s is not lead:
                s.shutdown()               # no quorum: an append stays pending
        pending = when(lead, lambda s: s.node.pusher.pending_count() >= 1)
        outcome = []
        with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
            def append():
                try:
                    outcome.append(c.append(b"pending"))
                except Exception as exc:    # noqa: BLE001 - the outcome under test
                    outcome.append(exc)

            t = threading.Thread(target=append)
            t.start()
            assert pending.wait(WAIT)
            lead.shutdown()
            t.join(WAIT)
            assert not t.is_alive()
        assert isinstance(outcome[0], AppendOutcomeUnknown), outcome
        assert outcome[0].code == Code.INTERNAL_ERROR     # the leader's answer came, and was unclear
    finally:
        g.stop_all()


def test_transfer_leadership_through_the_client(tcp_group):
    g = tcp_group
    lead = g.leader()
    target = next(i for i in g.ids if i != lead.config.self_id)
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        c.append(b"before")
        assert when(g.servers[target], lambda s: s.node.committed_index >= 0).wait(WAIT)
        r = c.transfer_leadership(target)
        assert r.code == Code.SUCCESS
        assert g.servers[target].is_leader
        assert c.transfer_leadership(target).code == Code.SUCCESS        # already leads
        assert c.append(b"after").code == Code.SUCCESS and c.leader_id == target


def test_no_reachable_node_is_unavailable_within_the_timeout_and_nothing_was_sent():
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    with DLedgerClient(peers, "t", timeout_s=0.5) as c:
        with pytest.raises(ClusterUnavailableError, match="within 0.5 s"):
            c.append(b"x")
        assert "error" in c.status()["n0"]


def test_a_secret_cluster_serves_a_client_with_the_secret_and_refuses_one_without(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_bytes(KEY + b"\n")
    monkeypatch.delenv("DLEDGER_SECRET", raising=False)
    g = TcpGroup(tmp_path, secret_file=str(secret)).start_all()
    try:
        g.leader()
        with DLedgerClient(g.peers, "t", secret=KEY, timeout_s=WAIT) as c:
            assert c.append(b"authenticated").code == Code.SUCCESS
        with DLedgerClient(g.peers, "t", secret_file=str(secret), timeout_s=WAIT) as c:
            assert c.get(0).body == b"authenticated"
        with DLedgerClient(g.peers, "t", timeout_s=0.5) as c:
            with pytest.raises(ClusterUnavailableError):
                c.append(b"anonymous")
            with pytest.raises(ClusterUnavailableError):
                c.transfer_leadership("n1")
        with DLedgerClient(g.peers, "t", secret=b"another-secret-0123456789", timeout_s=0.5) as c:
            with pytest.raises(ClusterUnavailableError):
                c.append(b"wrong")
        assert all(s.node.committed_index == 0 for s in g.servers.values() if s.is_leader)
    finally:
        g.stop_all()


def test_the_async_client_on_the_callers_loop(tcp_group):
    g = tcp_group
    g.leader()

    async def main():
        async with AsyncDLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
            rs = await asyncio.gather(*(c.append(b"a-%d" % i) for i in range(20)))
            assert sorted(r.index for r in rs) == list(range(20))
            assert (await c.get(5)).body in {b"a-%d" % i for i in range(20)}
            return (await c.metadata())["term"]

    assert asyncio.run(main()) >= 0
