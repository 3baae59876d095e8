"""Faults against ``dledger node`` processes on loopback (``node_processes.NodeProcesses``):
SIGKILL of the leader and of a follower, restarts on the same port, a leader cut off by TCP
proxies between the nodes, a client that knows one follower only, two groups on one port, a
member with the wrong secret, an unauthenticated peer, and garbage and oversized frames on a
node's port. Nodes run with a 1.5 s election timeout; every wait polls with a deadline."""

from __future__ import annotations

import asyncio
import socket
import zlib

import msgpack
import pytest

from dledger import AppendOutcomeUnknown
from dledger.entry import MAGIC_NORMAL
from dledger.errors import DLedgerError
from dledger.protocol import (_TAG_OF, CRC_BYTES, WIRE_VERSION, DLedgerResponseCode as Code, Envelope,
                              MetadataRequest, MetadataResponse, VoteRequest)
from dledger.store import open_store
from dledger.transport.auth import CLIENT, Peer
from dledger.transport.frames import FrameDecoder, encode_frame

from transport.node_processes import SECRET, NodeProcesses, wait_for
from transport.tcp_helpers import closed_by_peer, raw_connect


@pytest.fixture
def nodes(tmp_path):
    made = []

    def make(**kwargs) -> NodeProcesses:
        n = NodeProcesses(tmp_path, **kwargs)
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()


def append_all(client, tag: str, k: int, acked: dict) -> None:
    """Append ``k`` bodies; the acknowledged ones go into ``acked`` (index -> body). An append
    whose outcome is unknown (a failover under it) is not counted either way."""
    for j in range(k):
        body = f"{tag}-{j}".encode()
        try:
            r = client.append(body)
        except AppendOutcomeUnknown:
            continue
        assert r.code == Code.SUCCESS, r
        acked[r.index] = body


def caught_up(n: NodeProcesses, node_id: str, index: int, group: str = "g") -> bool:
    m = n.metadata(node_id, group)
    return m is not None and m["ledger_end_index"] >= index and m["committed_index"] >= index


def settle(n: NodeProcesses, acked: dict[int, bytes]) -> None:
    """Wait until every node holds and knows committed everything acknowledged so far. A
    brand-new cluster's node that has not yet checked an entry of its leader's term is still
    recovering and may not vote (an empty new store looks like a wiped one): losing the leader
    before that would leave the other two unable to elect, by design (docs/embedding.md)."""
    for i in n.ids:
        wait_for(lambda i=i: caught_up(n, i, max(acked)), f"{i} to reach index {max(acked)}")


def stop_and_read_stores(n: NodeProcesses, group: str = "g") -> dict[str, list]:
    """SIGTERM every node (each must exit 0) and read every store offline: node -> entries."""
    for i in n.ids:
        assert n.stop(i) == 0, n.log(i)[-2000:]
    out = {}
    for i in n.ids:
        with open_store(str(n.store_dir(group) / f"dledger-{i}")) as store:
            out[i] = [store.get(k) for k in range(store.ledger_end_index + 1)]
    return out


def assert_every_acked_entry_everywhere(stores: dict[str, list], acked: dict) -> None:
    for node_id, entries in stores.items():
        for index, body in acked.items():
            assert index < len(entries) and entries[index].body == body, (node_id, index)
    first = next(iter(stores.values()))
    assert all([(e.term, e.magic, e.body) for e in entries] == [(e.term, e.magic, e.body) for e in first]
               for entries in stores.values())


def test_sigkill_of_the_leader_then_of_a_follower_loses_no_acknowledged_entry_and_restarts_catch_up(nodes):
    n = nodes().start_all()
    acked: dict[int, bytes] = {}
    with n.client() as c:
        append_all(c, "before", 5, acked)
        settle(n, acked)
        first = n.leader()
        term = n.metadata(first)["term"]
        n.kill(first)
        append_all(c, "failover", 5, acked)            # the client finds the new leader
        second = n.leader([i for i in n.ids if i != first])
        assert n.metadata(second)["term"] > term
        n.start(first)                                  # the same port: the others reconnect
        wait_for(lambda: caught_up(n, first, max(acked)), f"{first} to catch up after its restart")
        follower = next(i for i in n.ids if i != second)
        n.kill(follower)
        append_all(c, "one-down", 5, acked)
        n.start(follower)
        append_all(c, "all-back", 3, acked)
        for i in n.ids:
            wait_for(lambda i=i: caught_up(n, i, max(acked)), f"{i} to reach index {max(acked)}")
    assert len(acked) >= 15
    assert_every_acked_entry_everywhere(stop_and_read_stores(n), acked)


def test_a_leader_cut_off_by_the_proxies_stops_committing_the_majority_goes_on_and_healing_converges(nodes):
    n = nodes(proxied=True).start_all()
    acked: dict[int, bytes] = {}
    with n.client() as c:
        append_all(c, "before", 3, acked)
    settle(n, acked)
    old = n.leader()
    before = n.metadata(old)
    assert all(p.accepted for p in n.proxies.values())     # every link runs through its proxy
    others = [i for i in n.ids if i != old]
    for i in others:
        n.proxy(old, i).cut()
        n.proxy(i, old).cut()
    new = n.leader(others)
    assert n.metadata(new)["term"] > before["term"]
    with n.client(others) as c:
        append_all(c, "majority", 5, acked)
    # every append to the majority is acknowledged (one of the first three may have been left
    # unknown by an election at the group's start: append_all counts it neither way)
    assert sum(body.startswith(b"majority-") for body in acked.values()) == 5
    # the cut-off node committed nothing more, and an append sent to it is never acknowledged
    with n.client([old], timeout=2.0) as c:
        with pytest.raises(DLedgerError):
            c.append(b"minority")
    assert n.metadata(old)["committed_index"] == before["committed_index"]
    for proxy in n.proxies.values():
        proxy.heal()
    for i in n.ids:
        wait_for(lambda i=i: caught_up(n, i, max(acked)), f"{i} to converge after the heal")
    m = wait_for(lambda: (lambda m: m if m and m["leader_id"] == new and m["role"] == "FOLLOWER" else None)(
        n.metadata(old)), f"{old} to follow {new}")
    assert m["term"] == n.metadata(new)["term"]
    stores = stop_and_read_stores(n)
    assert_every_acked_entry_everywhere(stores, acked)
    assert b"minority" not in [e.body for e in stores[old]]


def test_two_groups_share_each_port_and_a_client_that_knows_one_follower_finds_the_leader(nodes):
    n = nodes(groups=("g1", "g2")).start_all()
    acked = {"g1": {}, "g2": {}}
    for g in ("g1", "g2"):
        lead = n.leader(group=g)
        follower = next(i for i in n.ids if i != lead)
        with n.client([follower], group=g) as c:     # one follower's address: NOT_LEADER names the leader
            append_all(c, g, 4, acked[g])
            assert c.leader_id == lead
            assert c.get(max(acked[g])).body == acked[g][max(acked[g])]
        assert len(acked[g]) == 4
    for g in ("g1", "g2"):
        for i in n.ids:
            wait_for(lambda i=i, g=g: caught_up(n, i, max(acked[g]), g), f"{i} of {g} to catch up")
    for i in n.ids:
        assert n.stop(i) == 0, n.log(i)[-2000:]
    for g in ("g1", "g2"):
        for i in n.ids:
            with open_store(str(n.store_dir(g) / f"dledger-{i}")) as store:
                bodies = [store.get(k).body for k in range(store.ledger_end_index + 1)
                          if store.get(k).magic == MAGIC_NORMAL]
                assert bodies == [acked[g][k] for k in sorted(acked[g])], (g, i)


def test_a_wrong_secret_an_unauthenticated_peer_and_bad_frames_change_no_term_nor_log(nodes, tmp_path):
    n = nodes().start_all()
    acked: dict[int, bytes] = {}
    with n.client() as c:
        append_all(c, "x", 3, acked)
    lead = n.leader()
    stranger = next(i for i in n.ids if i != lead)
    for i in n.ids:
        wait_for(lambda i=i: caught_up(n, i, max(acked)), f"{i} to catch up")
    # a member restarted with another secret: it hears no leader, so it stands for election,
    # in vain (a round without a quorum of answers keeps its term)
    wrong = tmp_path / "wrong-secret"
    wrong.write_text("not-the-" + SECRET + "\n")
    assert n.stop(stranger) == 0
    n.start(stranger, secret_file=wrong)
    term = n.metadata(lead)["term"]
    wait_for(lambda: (n.metadata(stranger, secret_file=wrong) or {}).get("role") == "CANDIDATE",
             f"{stranger} (wrong secret) to stand for election")
    wait_for(lambda: "refused a connection" in n.log(lead), f"{lead} to refuse {stranger}'s handshake")

    # an outsider: frames without a handshake, a handshake with the wrong key, garbage, a
    # frame over the size limit; each connection is closed and the node keeps serving
    port = n.ports[lead]
    member = next(i for i in n.ids if i not in (lead, stranger))
    vote = encode_frame(Envelope(member, lead, 1, False, VoteRequest(
        group="g", local_id=member, remote_id=lead, leader_id=member, term=term + 50, ledger_end_term=term + 50,
        ledger_end_index=1000, leadership_transfer=True)))

    async def outsider() -> None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(vote)                                   # no handshake at all
        assert await closed_by_peer(r, 10)
        r, w, _h, _p = await raw_connect(port, Peer("g", member, lead), [b"not-the-secret-0123456789"])
        w.write(vote)
        assert await closed_by_peer(r, 10)
        for bad in (b"\x00\x00\x00\x08garbage!", (1 << 27).to_bytes(4, "big") + b"x" * 64, b"\xff" * 64):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(bad)
            assert await closed_by_peer(r, 10)

    asyncio.run(outsider())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:   # a half-sent frame, then gone
        s.sendall(b"\x00\x00\x10\x00" + b"y" * 100)
    m = n.metadata(lead)
    assert (m["role"], m["term"], m["ledger_end_index"]) == ("LEADER", term, max(acked))
    assert n.metadata(member)["term"] == term
    stray = n.metadata(stranger, secret_file=wrong)
    assert stray["ledger_end_index"] == max(acked) and stray["committed_index"] <= max(acked)
    with n.client([lead, member]) as c:                 # still serving
        append_all(c, "after", 2, acked)
    assert len(acked) == 5 and max(acked) == 4


def test_a_request_of_another_wire_version_is_answered_unsupported_and_the_node_keeps_serving(nodes):
    """Scenario BI-03 against a node process: a client's metadata request packed as wire
    version 3 gets a MetadataResponse with code UNSUPPORTED and the request id back on the
    client's connection (which then closes: the rest of a stream of another version cannot be
    read either); a version 2 request on a new connection is served as before."""
    n = nodes().start_all()
    node = n.leader()
    peer = Peer("g", "app-1", node, CLIENT)

    def metadata_frame(version: int, request_id: int) -> bytes:
        body = msgpack.packb([version, "app-1", node, request_id, False, _TAG_OF[MetadataRequest],
                              ["g", node, "app-1", 200, None, -1]], use_bin_type=True)
        payload = body + zlib.crc32(body).to_bytes(CRC_BYTES, "big")
        return len(payload).to_bytes(4, "big") + payload

    async def ask(version: int, request_id: int):
        r, w, _h, _p = await raw_connect(n.ports[node], peer, [SECRET.encode()])
        w.write(metadata_frame(version, request_id))
        decoder = FrameDecoder()
        while True:
            data = await asyncio.wait_for(r.read(4096), 10)
            assert data, "closed without an answer"
            envs = decoder.feed(data)
            if envs:
                closed = await closed_by_peer(r, 10) if version != WIRE_VERSION else None
                w.close()
                return envs[0], closed

    env, closed = asyncio.run(ask(3, 77))
    assert env.is_response and env.request_id == 77 and env.dst == "app-1"
    assert isinstance(env.msg, MetadataResponse) and env.msg.code == Code.UNSUPPORTED and closed
    env, _ = asyncio.run(ask(WIRE_VERSION, 78))
    assert env.request_id == 78 and env.msg.code == Code.SUCCESS and env.msg.role == "LEADER"


def test_the_fault_proxy_forwards_delays_blackholes_and_cuts():
    """The proxy the partition test relies on, against an echo server: it forwards, delays,
    swallows (the connection stays open) and cuts (open connections closed, new ones refused)."""
    import threading
    import time

    from helpers.tcp_proxy import TcpProxy

    server = socket.create_server(("127.0.0.1", 0))

    def echo():
        while True:
            try:
                conn, _a = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")],
                             daemon=True).start()

    threading.Thread(target=echo, daemon=True).start()
    proxy = TcpProxy(server.getsockname()[1])
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            s.sendall(b"ping")
            assert s.recv(16) == b"ping"
            proxy.delay(300)
            t0 = time.monotonic()
            s.sendall(b"slow")
            assert s.recv(16) == b"slow" and time.monotonic() - t0 >= 0.3
            proxy.blackhole()
            s.sendall(b"lost")
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):
                s.recv(16)
            proxy.cut()
            s.settimeout(5)
            assert s.recv(16) == b""                   # closed by the cut
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            assert s.recv(16) == b""                   # refused while cut
        proxy.heal()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            s.sendall(b"back")
            assert s.recv(16) == b"back"
    finally:
        proxy.close()
        server.close()
