"""The client's resend rule against scripted nodes (real sockets, one fake node per test): an
append whose answer is lost or unclear is reported as unknown and never sent twice; one refused
before it was taken (NOT_LEADER, connection refused) is sent again."""

import asyncio
import threading

import pytest
from hypothesis import given, settings, strategies as st

from dledger import AppendOutcomeUnknown, AppendRefusedError, AsyncDLedgerClient, ClusterUnavailableError, DLedgerClient
from dledger.protocol import (AppendEntryRequest, AppendEntryResponse, DLedgerResponseCode as Code, Envelope,
                              MetadataRequest, MetadataResponse)
from dledger.transport.auth import ServerHandshake
from dledger.transport.frames import FrameDecoder, encode_frame, frame_payload
from dledger.transport.tcp_connection import read_payload

from transport.tcp_helpers import free_ports


class ScriptedNode:
    """Node "n0" of group "t" on its own loop thread: answers metadata naming itself leader, and
    answers the k-th append with ``script[k]`` (an answer code, "drop" to close the
    connection without answering, or "silent" to say nothing and keep it open). ``appends`` counts the appends that arrived."""

    def __init__(self, script):
        self.script = list(script)
        self.appends = 0
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result(5)

    async def _listen(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader, writer):
        decoder = FrameDecoder()
        hs = ServerHandshake(())
        writer.write(frame_payload(hs.on_hello(await read_payload(reader, decoder, 4096))))
        peer = hs.on_proof(await read_payload(reader, decoder, 4096))
        envs = decoder.feed()
        while True:
            for env in envs:
                msg = env.msg
                if isinstance(msg, MetadataRequest):
                    resp = MetadataResponse(group="t", local_id="n0", leader_id="n0", term=1,
                                            peers={"n0": f"127.0.0.1:{self.port}"})
                elif isinstance(msg, AppendEntryRequest):
                    step = self.script[self.appends] if self.appends < len(self.script) else Code.SUCCESS
                    self.appends += 1
                    if step == "drop":
                        writer.close()
                        return
                    if step == "silent":
                        continue
                    resp = AppendEntryResponse(group="t", local_id="n0", leader_id="n0", term=1, code=int(step),
                                               index=self.appends - 1)
                else:
                    continue
                writer.write(encode_frame(Envelope("n0", peer.src, env.request_id, True, resp)))
            data = await reader.read(4096)
            if not data:
                return
            envs = decoder.feed(data)

    @property
    def peers(self):
        return f"n0-127.0.0.1:{self.port}"

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def scripted():
    nodes = []

    def make(script):
        nodes.append(ScriptedNode(script))
        return nodes[-1]

    yield make
    for n in nodes:
        n.close()


def test_an_append_whose_answer_is_lost_is_unknown_and_sent_once(scripted):
    node = scripted(["drop"])
    with DLedgerClient(node.peers, "t", timeout_s=2.0) as c:
        with pytest.raises(AppendOutcomeUnknown):
            c.append(b"x")
        assert node.appends == 1
        assert c.append(b"y").code == Code.SUCCESS and node.appends == 2     # the client still works


@pytest.mark.parametrize("code", [Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT, Code.INTERNAL_ERROR])
def test_an_unclear_answer_is_unknown_and_not_resent(scripted, code):
    node = scripted([code])
    with DLedgerClient(node.peers, "t", timeout_s=2.0) as c:
        with pytest.raises(AppendOutcomeUnknown) as exc:
            c.append(b"x")
        assert exc.value.code == code and node.appends == 1


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from([Code.NOT_LEADER, Code.LEADER_TRANSFERRING, Code.LEADER_PENDING_FULL]),
                max_size=4))
def test_answers_given_before_the_append_was_taken_are_resent_until_it_is(refusals):
    node = ScriptedNode(refusals + [Code.SUCCESS])
    try:
        with DLedgerClient(node.peers, "t", timeout_s=5.0) as c:
            assert c.append(b"x").code == Code.SUCCESS
        assert node.appends == len(refusals) + 1
    finally:
        node.close()


def test_a_definite_refusal_is_an_error_and_not_resent(scripted):
    node = scripted([Code.UNEXPECTED_ARGUMENT])
    with DLedgerClient(node.peers, "t", timeout_s=2.0) as c:
        with pytest.raises(AppendRefusedError) as exc:
            c.append(b"x")
        assert exc.value.code == Code.UNEXPECTED_ARGUMENT and node.appends == 1


def test_an_append_never_answered_is_unknown_at_the_deadline_and_not_resent(scripted):
    node = scripted(["silent"])

    async def main():
        async with AsyncDLedgerClient(node.peers, "t", timeout_s=0.5) as c:
            with pytest.raises(AppendOutcomeUnknown) as exc:       # not the guard's TimeoutError
                await asyncio.wait_for(c.append(b"x"), 5)
            assert "did not answer within 0.5 s" in str(exc.value)
            assert node.appends == 1
            return (await asyncio.wait_for(c.append(b"y"), 5)).code

    assert asyncio.run(main()) == Code.SUCCESS                     # the connection still serves


def test_refusals_until_the_timeout_are_unavailable_never_unknown(scripted):
    node = scripted([Code.NOT_LEADER] * 1000)
    with DLedgerClient(node.peers, "t", timeout_s=0.5) as c:
        with pytest.raises(ClusterUnavailableError):
            c.append(b"x")
    assert node.appends >= 2
