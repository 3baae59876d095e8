"""Appends that wait for a send slot travel together, and each caller still gets its own
entry: the coalescer against a scripted ``send``, and the client against three real nodes."""

import asyncio

import pytest
from hypothesis import given, settings, strategies as st

from dledger import AppendOutcomeUnknown, AsyncDLedgerClient
from dledger.client.coalesce import AppendCoalescer

from transport.tcp_helpers import WAIT, TcpGroup, when


class ScriptedSend:
    """Answers each request after the test releases it; records the bodies of each request."""

    def __init__(self, fail_with=None):
        self.requests: list[list[bytes]] = []
        self.release = asyncio.Event()
        self.fail_with = fail_with

    async def __call__(self, bodies, deadline):
        self.requests.append(list(bodies))
        await self.release.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return [b"answer:" + b for b in bodies]


def test_appends_made_while_every_slot_is_busy_go_together_after_the_first():
    async def main():
        send = ScriptedSend()
        c = AppendCoalescer(send, max_in_flight=1)
        first = asyncio.ensure_future(c.append(b"a", 1e9))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(c.append(b"%d" % k, 1e9)) for k in range(5)]
        await asyncio.sleep(0)
        send.release.set()
        answers = await asyncio.gather(first, *rest)
        return send.requests, answers

    requests, answers = asyncio.run(main())
    assert requests == [[b"a"], [b"0", b"1", b"2", b"3", b"4"]]
    assert answers == [b"answer:a"] + [b"answer:%d" % k for k in range(5)]


def test_every_append_of_a_request_shares_its_failure():
    async def main():
        send = ScriptedSend(fail_with=AppendOutcomeUnknown("lost"))
        c = AppendCoalescer(send, max_in_flight=1)
        futs = [asyncio.ensure_future(c.append(b"%d" % k, 1e9)) for k in range(4)]
        await asyncio.sleep(0)
        send.release.set()
        return send.requests, await asyncio.gather(*futs, return_exceptions=True)

    requests, results = asyncio.run(main())
    assert sum(map(len, requests)) == 4                     # each body sent once, never again
    assert all(isinstance(r, AppendOutcomeUnknown) for r in results)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=60), st.integers(1, 4),
       st.integers(1, 8), st.integers(1, 4096))
def test_each_body_is_sent_once_in_order_within_the_limits(sizes, slots, max_bodies, max_bytes):
    async def main():
        send = ScriptedSend()
        send.release.set()
        c = AppendCoalescer(send, max_in_flight=slots, max_bodies=max_bodies, max_bytes=max_bytes)
        bodies = [bytes([k % 256]) * n + b"#%d" % k for k, n in enumerate(sizes)]
        answers = await asyncio.gather(*(c.append(b, 1e9) for b in bodies))
        return bodies, send.requests, answers

    bodies, requests, answers = asyncio.run(main())
    assert answers == [b"answer:" + b for b in bodies]
    assert sorted(b for r in requests for b in r) == sorted(bodies)
    for r in requests:
        assert len(r) <= max_bodies
        assert len(r) == 1 or sum(map(len, r)) <= max_bytes


@pytest.fixture
def tcp_group(tmp_path):
    g = TcpGroup(tmp_path).start_all()
    yield g
    g.stop_all()


def test_concurrent_appends_through_the_client_each_get_their_own_index_and_position(tcp_group):
    g = tcp_group
    lead = g.leader()

    async def main():
        async with AsyncDLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
            bodies = [b"c-%03d" % k for k in range(300)]
            rs = await asyncio.gather(*(c.append(b) for b in bodies))
            return bodies, rs, c._coalescer.requests

    bodies, rs, requests = asyncio.run(main())
    assert requests < len(bodies)                       # some appends travelled together
    assert sorted(r.index for r in rs) == list(range(300))
    assert when(lead, lambda s: s.node.committed_index >= 299).wait(WAIT)
    for body, r in zip(bodies, rs):
        entry = lead.get(r.index)
        assert entry.body == body and entry.pos == r.pos and r.positions == [r.pos]   # as a lone append's
