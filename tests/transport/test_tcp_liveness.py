"""A silent peer is detected by the missing keepalive traffic, on both ends of a connection,
and a link re-opens on its own; a full send queue drops its oldest frames. Real sockets on
127.0.0.1 with short timeouts; every wait is bounded."""

import asyncio
import threading

import pytest

from dledger.protocol import Envelope, HeartBeatRequest
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.auth import Peer, ServerHandshake
from dledger.transport.frames import KEEPALIVE, FrameDecoder, frame_payload
from dledger.transport.tcp import TcpNetwork
from dledger.transport.tcp_connection import SendQueue, TcpOptions, read_payload

from transport.tcp_helpers import closed_by_peer, free_ports, raw_connect

SHORT = TcpOptions(keepalive_ms=50, idle_timeout_ms=300, write_timeout_ms=300, backoff_min_ms=10,
                   backoff_max_ms=50)


@pytest.fixture
def runtime():
    rt = AsyncioRuntime()
    yield rt
    rt.close()


def network(rt, port=0, options=SHORT) -> TcpNetwork:
    return rt.run_sync(lambda: TcpNetwork.for_address("127.0.0.1", port, rt.loop, options=options))


def test_a_connected_peer_that_goes_silent_is_closed_after_the_idle_timeout(runtime):
    net = network(runtime)
    rt_ep = runtime.run_sync(lambda: net.endpoint("g", "b", {"a": "127.0.0.1:1", "b": f"127.0.0.1:{net.port}"}))

    async def go():
        loop = asyncio.get_running_loop()
        r, w, _h, _p = await raw_connect(net.port, Peer("g", "a", "b"))
        started = loop.time()
        assert await closed_by_peer(r, timeout=5)          # it keeps silent: no keepalive
        return loop.time() - started

    took = asyncio.run(go())
    assert 0.25 <= took < 3, took
    runtime.run_sync(rt_ep.close)


def test_a_peer_that_sends_keepalives_is_kept(runtime):
    net = network(runtime)
    ep = runtime.run_sync(lambda: net.endpoint("g", "b", {"a": "127.0.0.1:1", "b": f"127.0.0.1:{net.port}"}))

    async def go():
        r, w, _h, _p = await raw_connect(net.port, Peer("g", "a", "b"))
        for _ in range(12):                                 # 1.2 s: four idle timeouts
            w.write(KEEPALIVE)
            await w.drain()
            assert not await closed_by_peer(r, timeout=0.1)
        assert await asyncio.to_thread(runtime.run_sync, lambda: len(net.inbound)) == 1
        w.close()

    asyncio.run(go())
    runtime.run_sync(ep.close)


def test_a_peer_that_stops_answering_is_detected_and_the_link_reopens(runtime):
    """A fake node completes the handshake and then freezes (reads and sends nothing): the
    sender notices the silence and connects again, over and over, each attempt backed off."""
    fake_port, own_port = free_ports(2)
    handshakes = []

    async def fake():
        done = asyncio.Event()

        async def on_conn(reader, writer):
            decoder = FrameDecoder()
            hs = ServerHandshake()
            writer.write(frame_payload(hs.on_hello(await read_payload(reader, decoder, 4096))))
            handshakes.append(hs.on_proof(await read_payload(reader, decoder, 4096)))
            if len(handshakes) >= 3:
                done.set()
            await done.wait()                               # frozen: nothing read, nothing sent

        server = await asyncio.start_server(on_conn, "127.0.0.1", fake_port)
        started.set_result(None)
        try:
            await asyncio.wait_for(done.wait(), 10)
        finally:
            server.close()

    loop = asyncio.new_event_loop()
    started = loop.create_future()
    task = loop.create_task(fake())
    loop.run_until_complete(started)
    net = network(runtime, own_port)
    peers = {"a": f"127.0.0.1:{own_port}", "b": f"127.0.0.1:{fake_port}"}
    ep = runtime.run_sync(lambda: net.endpoint("g", "a", peers))
    runtime.run_sync(lambda: ep.send(Envelope("a", "b", 1, False, HeartBeatRequest(group="g", term=1))))
    loop.run_until_complete(task)
    loop.close()
    assert [h.src for h in handshakes] == ["a", "a", "a"]
    # the third handshake began after the second connection was up and then given up
    assert runtime.run_sync(lambda: ep.links["b"].connects) >= 2
    runtime.run_sync(ep.close)


def test_a_full_send_queue_drops_its_oldest_frames_and_counts_them():
    async def go():
        q = SendQueue(max_frames=3, max_bytes=100)
        for i in range(5):
            q.put(bytes([i]) * 10)
        assert [f[0] for f in q.frames] == [2, 3, 4] and q.dropped == 2
        q.put(b"x" * 90)                                    # bytes bound: the oldest give way
        assert list(q.frames) == [b"\x04" * 10, b"x" * 90] and q.dropped == 4 and q.bytes == 100
        q.put(b"y" * 500)                                   # alone, a frame always fits
        assert list(q.frames) == [b"y" * 500] and q.dropped == 6
        assert q.take_all() == [b"y" * 500] and q.bytes == 0

    asyncio.run(go())


def test_options_are_checked():
    with pytest.raises(ValueError, match="idle_timeout_ms"):
        TcpOptions(keepalive_ms=500, idle_timeout_ms=500).validate()
    with pytest.raises(ValueError, match="max_frame_bytes"):
        TcpOptions(max_frame_bytes=1 << 40).validate()
    with pytest.raises(ValueError, match="positive"):
        TcpOptions(max_connections=0).validate()


def test_an_idle_link_is_kept_open_by_keepalives_both_ways(runtime):
    """One envelope opens the link, then nothing is sent for four idle timeouts: keepalives on
    both ends keep the connection, so it is neither closed nor re-opened."""
    na, nb = network(runtime), network(runtime)
    peers = {"a": f"127.0.0.1:{na.port}", "b": f"127.0.0.1:{nb.port}"}
    got, closed = threading.Event(), threading.Event()
    nb.on_connection_closed.append(lambda peer, reason: closed.set())

    def setup():
        ea, eb = na.endpoint("g", "a", peers), nb.endpoint("g", "b", peers)
        eb.set_receiver(lambda env: got.set())
        ea.send(Envelope("a", "b", 1, False, HeartBeatRequest(group="g", term=1)))
        return ea, eb

    ea, eb = runtime.run_sync(setup)
    assert got.wait(5)
    assert not closed.wait(4 * SHORT.idle_timeout_ms / 1000)
    assert runtime.run_sync(lambda: (ea.links["b"].connects, len(nb.inbound))) == (1, 1)
    runtime.run_sync(lambda: (ea.close(), eb.close()))


def test_a_connection_that_never_finishes_its_handshake_is_closed(runtime):
    """A slow or idle client ties up a connection slot for ``handshake_timeout_ms`` at most."""
    opts = TcpOptions(keepalive_ms=50, idle_timeout_ms=300, handshake_timeout_ms=200)
    net = network(runtime, options=opts)
    ep = runtime.run_sync(lambda: net.endpoint("g", "b", {"a": "127.0.0.1:1", "b": f"127.0.0.1:{net.port}"}))

    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", net.port)
        writer.write(b"\x00\x00")                      # half a length prefix, then nothing
        assert await closed_by_peer(reader, timeout=5)

    asyncio.run(go())
    assert net.stats["handshake_failed"] == 1 and not net._pending
    runtime.run_sync(ep.close)


def test_frames_for_an_unreachable_peer_are_dropped_not_hoarded(runtime):
    """Nobody listens on b's port: each failed attempt drops what waited for it (counted)."""
    own, dead = free_ports(2)
    net = network(runtime, own)
    ep = runtime.run_sync(lambda: net.endpoint("g", "a", {"a": f"127.0.0.1:{own}", "b": f"127.0.0.1:{dead}"}))
    failed = threading.Event()

    def send():
        for i in range(5):
            ep.send(Envelope("a", "b", i, False, HeartBeatRequest(group="g", term=1)))
        ep.links["b"].on_failure.append(lambda exc: failed.set())
        return ep.links["b"]

    link = runtime.run_sync(send)                  # the attempt starts on the loop after this
    assert failed.wait(5)
    assert runtime.run_sync(lambda: (len(link.queue.frames), ep.dropped)) == (0, 5)
    runtime.run_sync(ep.close)
