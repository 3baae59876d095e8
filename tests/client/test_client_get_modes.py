"""``DLedgerClient.get`` read modes over real TCP on 127.0.0.1, in one process: the default
(READ_INDEX_READ) reads through a node that confirms it leads, so a client whose idea of the
leader is wrong still never sees an acknowledged entry vanish; UNSAFE_READ, an explicit choice,
reads one node's own log and may. One follower is kept behind by dropping the pushes it gets.

Every wait is on a future or an event with a timeout; the client's own timeout bounds each call.
"""

import pytest

from dledger import DLedgerClient, DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, PushEntryRequest, ReadMode

from transport.tcp_helpers import WAIT, TcpGroup, when


@pytest.fixture
def lagging_group(tmp_path):
    """A TCP group with one entry committed everywhere, then one follower that no longer takes
    pushes: (group, leader, the follower that keeps up, the lagging one)."""
    g = TcpGroup(tmp_path).start_all()
    try:
        lead = g.leader()
        first = lead.append(b"first").result(WAIT)
        assert first.ok
        up, lagging = [g.servers[i] for i in g.ids if g.servers[i] is not lead]
        for s in (up, lagging):
            assert when(s, lambda s: s.node.committed_index >= first.index).wait(WAIT)

        def drop_pushes() -> None:
            deliver = lagging.driver.on_envelope
            lagging._transport.set_receiver(lambda env: None if isinstance(env.msg, PushEntryRequest)
                                            else deliver(env))

        lagging.runtime.run_sync(drop_pushes)
        yield g, lead, up, lagging
    finally:
        g.stop_all()


def test_the_default_get_follows_the_leader_where_a_local_read_of_a_lagging_node_misses_the_entry(lagging_group):
    g, lead, up, lagging = lagging_group
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        acked = c.append(b"second")
        assert acked.ok and lagging.node.committed_index < acked.index
        # the client believes the lagging follower leads: the default get is answered NOT_LEADER
        # there, follows the hint and reads the entry at the leader
        c._aio.leader_id = lagging.config.self_id
        assert c.get(acked.index).body == b"second"
        assert c.leader_id == lead.config.self_id
        # the same belief with a local read: the lagging node answers from its own log
        c._aio.leader_id = lagging.config.self_id
        with pytest.raises(DLedgerError) as exc:
            c.get(acked.index, ReadMode.UNSAFE_READ)
        assert exc.value.code == Code.INDEX_OUT_OF_RANGE
        assert c.get(acked.index - 1, "unsafe_read").body == b"first"


def test_a_local_read_is_served_by_any_node_and_the_linearizable_modes_only_by_the_leader(lagging_group):
    g, lead, up, lagging = lagging_group
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        acked = c.append(b"second")
        assert when(up, lambda s: s.node.committed_index >= acked.index).wait(WAIT)
        for mode in ReadMode:
            assert c.get(acked.index, mode).body == b"second", mode
            assert c.get(acked.index, mode, node_id=lead.config.self_id).body == b"second", mode
        assert c.get(acked.index, ReadMode.UNSAFE_READ, node_id=up.config.self_id).body == b"second"
        with pytest.raises(DLedgerError) as exc:
            c.get(acked.index, ReadMode.UNSAFE_READ, node_id=lagging.config.self_id)
        assert exc.value.code == Code.INDEX_OUT_OF_RANGE
        for mode in (ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ, ReadMode.RAFT_LOG_READ):
            with pytest.raises(DLedgerError) as exc:
                c.get(acked.index, mode, node_id=up.config.self_id)
            assert exc.value.code == Code.NOT_LEADER, mode
        with pytest.raises(DLedgerError) as exc:
            c.get(acked.index + 5)
        assert exc.value.code == Code.INDEX_OUT_OF_RANGE
        with pytest.raises(ValueError, match="read mode"):
            c.get(acked.index, "fast")
        with pytest.raises(ValueError, match="not in peers"):
            c.get(acked.index, node_id="n9")
