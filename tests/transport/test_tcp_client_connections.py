"""Client connections on a TCP listener (real sockets): what a client may send, and that
answers come back on the client's own connection. The target is node n1 of a three-node group
with a secret, alone (no vote round for a minute), so its term moves only if a message moves it."""

import asyncio

import pytest

from dledger.protocol import (DLedgerResponseCode as Code, Envelope, FrameError, LeadershipTransferRequest,
                              MetadataRequest, MetadataResponse)
from dledger.transport.auth import CLIENT, Peer
from dledger.transport.frames import FrameDecoder, encode_frame

from transport.test_tcp_security import KEY, target, term_of, vote  # noqa: F401 (fixture)
from transport.tcp_helpers import WAIT, closed_by_peer, raw_connect


async def answer(reader, decoder: FrameDecoder):
    while True:
        data = await asyncio.wait_for(reader.read(4096), WAIT)
        if not data:
            raise ConnectionError("closed")
        envs = decoder.feed(data)
        if envs:
            return envs[0]


def test_a_client_gets_metadata_back_on_its_own_connection(target):
    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "app-1", "n1", CLIENT), [KEY])
        w.write(encode_frame(Envelope("app-1", "n1", 7, False, MetadataRequest(group="t", local_id="app-1",
                                                                              remote_id="n1"))))
        return await answer(r, FrameDecoder())

    env = asyncio.run(go())
    assert env.is_response and env.request_id == 7 and env.dst == "app-1"
    assert isinstance(env.msg, MetadataResponse) and env.msg.code == Code.SUCCESS
    assert set(env.msg.peers) == {"n0", "n1", "n2"}


@pytest.mark.parametrize("make", [
    lambda term: vote(term, src="app-1"),
    lambda term: encode_frame(Envelope("app-1", "n1", 3, False, LeadershipTransferRequest(
        group="t", local_id="app-1", remote_id="n1", term=term, transfer_id="n0", transferee_id="n1"))),
    lambda term: encode_frame(Envelope("app-1", "n1", 3, True, MetadataResponse(group="t"))),
], ids=["vote", "transferee-leg-of-a-transfer", "a-response"])
def test_a_client_connection_carrying_member_traffic_is_closed_and_changes_nothing(target, make):
    before = term_of(target)

    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "app-1", "n1", CLIENT), [KEY])
        w.write(make(before + 1000))
        assert await closed_by_peer(r)

    asyncio.run(go())
    assert term_of(target) == before and target.net.stats["client_refused"] == 1


@pytest.mark.parametrize("who", [Peer("t", "n0", "n1", CLIENT), Peer("t", "", "n1", CLIENT),
                                 Peer("t", "x" * 200, "n1", CLIENT)], ids=["member-id", "empty", "too-long"])
def test_a_client_may_not_use_a_member_id_or_a_bad_id(target, who):
    async def go():
        try:
            r, _w, _h, _p = await raw_connect(target.port, who, [KEY])
        except ConnectionError:
            return
        assert await closed_by_peer(r)

    asyncio.run(go())
    assert target.net.stats["authenticated"] == 0 and target.net.stats["handshake_failed"] == 1


def test_a_client_without_the_secret_is_refused_before_any_request(target):
    async def go():
        r, w, _h, _p = await raw_connect(target.port, Peer("t", "app-1", "n1", CLIENT), [])
        w.write(encode_frame(Envelope("app-1", "n1", 1, False, MetadataRequest(group="t", local_id="app-1",
                                                                              remote_id="n1"))))
        decoder = FrameDecoder()
        with pytest.raises((ConnectionError, FrameError)):
            await answer(r, decoder)

    asyncio.run(go())
    assert target.net.stats["authenticated"] == 0 and target.net.stats["handshake_failed"] == 1
