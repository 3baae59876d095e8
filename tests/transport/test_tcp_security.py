"""What a TCP listener refuses, with real sockets: a wrong secret, a replayed handshake, a
malformed or oversized frame, an envelope that speaks for another node, too many
connections. The target is one node of a three-node group whose next vote round is a minute
away, so its term changes only when a peer's message moves it; an outsider claims to be member ``n0``."""


import asyncio
import threading

import pytest

from dledger.protocol import DLedgerResponseCode as Code, Envelope, VoteRequest
from dledger.transport.auth import Peer
from dledger.transport.frames import KEEPALIVE, encode_frame

from transport.tcp_helpers import WAIT, TcpGroup, closed_by_peer, raw_connect, when

KEY = b"the-cluster-secret-0123456789"
QUIET = dict(min_vote_interval_ms=60_000, max_vote_interval_ms=60_000)


def vote(term: int, src: str = "n0", dst: str = "n1") -> bytes:
    """A vote request that moves the target to ``term`` if it is ever handled (a transferee's
    vote skips the wait for a live leader; its log is ahead of the target's)."""
    return encode_frame(Envelope(src, dst, 1, False, VoteRequest(group="t", local_id=src, remote_id=dst,
                                                                 leader_id=src, term=term, ledger_end_term=5,
                                                                 ledger_end_index=10, leadership_transfer=True)))


@pytest.fixture
def target(tmp_path):
    """Node n1 alone (n0 and n2 are down), no vote round for a minute, the secret from a file;
    a new cluster (``bootstrap``), so the new store may vote at once."""
    secret = tmp_path / "secret"
    secret.write_bytes(KEY + b"\n")
    g = TcpGroup(tmp_path, store_type="memory", secret_file=str(secret), bootstrap=True, **QUIET)
    s = g.start("n1")
    g.port = g.ports[1]
    g.target = s
    g.net = s._transport.network
    yield g
    g.stop_all()


def term_of(g) -> int:
    return g.runtime.run_sync(lambda: g.target.node.term)


def test_the_right_secret_lets_a_vote_request_raise_the_term(target):
    """The control for the refusals below: the same frames on an authenticated connection
    do change state."""
    moved = when(target.target, lambda s: s.node.term == 1000)

    async def go():
        _r, w, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        w.write(vote(1000))
        await w.drain()
        assert await asyncio.to_thread(moved.wait, WAIT)
        w.close()

    asyncio.run(go())
    assert term_of(target) == 1000 and target.net.stats["authenticated"] == 1


@pytest.mark.parametrize("keys", [[b"a-wrong-secret-0123456789"], []], ids=["wrong", "none"])
def test_a_wrong_or_missing_secret_is_refused_and_changes_no_state(target, keys):
    before = term_of(target)

    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), keys)
        w.write(vote(before + 1000) * 3)
        try:
            await w.drain()
        except ConnectionError:
            pass
        assert await closed_by_peer(r)

    asyncio.run(go())
    assert term_of(target) == before
    assert target.net.stats["handshake_failed"] == 1 and target.net.stats["authenticated"] == 0


def test_a_replayed_handshake_is_refused_on_a_new_connection(target):
    before = term_of(target)

    async def go():
        r, w, hello, proof = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        w.close()                                       # a recorded, valid handshake
        r2, w2, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), hello=hello, proof=proof)
        w2.write(vote(before + 1000))
        assert await closed_by_peer(r2)

    asyncio.run(go())
    assert term_of(target) == before
    assert target.net.stats["authenticated"] == 1 and target.net.stats["handshake_failed"] == 1


@pytest.mark.parametrize("who", [Peer("other", "n0", "n1"), Peer("t", "x9", "n1"), Peer("t", "n0", "n2")],
                         ids=["unknown-group", "not-a-peer", "node-not-here"])
def test_a_handshake_for_a_group_or_id_not_served_here_is_refused(target, who):
    async def go():
        try:
            r, _w, _h, _p = await raw_connect(target.port, who, [KEY])
        except ConnectionError:
            return                                     # refused at hello: closed before the challenge
        assert await closed_by_peer(r)

    asyncio.run(go())
    assert target.net.stats["handshake_failed"] == 1 and target.net.stats["authenticated"] == 0


@pytest.mark.parametrize("bad", [
    b"\xff\xff\xff\xff",                                  # a length prefix of 0xFFFFFFFF
    (1 << 27).to_bytes(4, "big") + b"x" * 100,             # beyond the 64 MiB frame limit
    b"\x00\x00\x00\x08" + b"garbage!",                     # a frame that is not an envelope
], ids=["0xffffffff", "over-limit", "garbage"])
def test_a_malformed_frame_closes_that_connection_only(target, bad):
    before = term_of(target)
    moved = when(target.target, lambda s: s.node.term == before + 7)

    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        r2, w2, _h2, _p2 = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        w.write(KEEPALIVE + bad)
        assert await closed_by_peer(r)
        w2.write(vote(before + 7))                     # the other connection still works
        await w2.drain()
        assert await asyncio.to_thread(moved.wait, WAIT)
        w2.close()

    asyncio.run(go())
    assert target.net.stats["bad_frame"] == 1 and target.net.stats["authenticated"] == 2


def test_a_truncated_frame_is_never_applied(target):
    before = term_of(target)
    frame = vote(before + 1000)

    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        w.write(frame[:-1])                            # all but the last byte, then a reset
        await w.drain()
        w.transport.abort()

    ended = threading.Event()
    target.net.on_connection_closed.append(lambda peer, reason: ended.set())
    asyncio.run(go())
    assert ended.wait(WAIT)          # the listener saw the connection end, the partial frame with it
    assert term_of(target) == before


def test_an_authenticated_peer_cannot_speak_for_another_node(target):
    before = term_of(target)

    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "n0", "n1"), [KEY])
        w.write(vote(before + 1000, src="n2"))        # n0's connection, n2's name
        assert await closed_by_peer(r)

    asyncio.run(go())
    assert term_of(target) == before


def test_connections_beyond_the_cap_are_closed_at_accept(tmp_path):
    g = TcpGroup(tmp_path, store_type="memory", max_connections=2, **QUIET)
    g.start("n1")
    net = g.servers["n1"]._transport.network
    try:
        async def go():
            held = [await raw_connect(g.ports[1], Peer("t", "n0", "n1")) for _ in range(2)]
            reader, _writer = await asyncio.open_connection("127.0.0.1", g.ports[1])
            assert await closed_by_peer(reader)
            for _r, w, _h, _p in held:
                w.close()

        asyncio.run(go())
        assert net.stats["refused_cap"] == 1 and net.stats["authenticated"] == 2
    finally:
        g.stop_all()


def test_a_server_with_another_secret_never_joins_while_the_others_commit(tmp_path):
    # a new cluster started with one member unreachable elects only if told it is new
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_bytes(KEY + b"\n")
    wrong.write_bytes(b"not-the-cluster-secret-0123456789\n")
    g = TcpGroup(tmp_path, store_type="memory", secret_file=str(right), bootstrap=True)
    g.overrides["n2"] = {"secret_file": str(wrong)}
    g.start_all()
    try:
        lead = g.leader()
        assert lead.config.self_id in ("n0", "n1")
        r = lead.append(b"members only").result(WAIT)
        assert r.code == Code.SUCCESS
        outsider = g.servers["n2"]
        assert not when(outsider, lambda s: s.node.committed_index >= r.index or s.leader_id is not None).wait(1.5)
        refused = sum(s._transport.network.stats["handshake_failed"] for s in g.servers.values())
        assert refused > 0
    finally:
        g.stop_all()
