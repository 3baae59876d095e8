"""DLedgerServer on the real asyncio runtime with the in-process transport.

These tests run in real time, so they wait on futures and events (with timeouts), never on
sleeps. Each test gets its own event loop thread and hub, so tests do not share state.
"""

import asyncio
import pathlib
import struct
import threading
import time

import pytest

from dledger import DLedgerConfig, DLedgerServer
from dledger.core import Role
from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


class Group:
    def __init__(self, base_dir, n=3, store_type="file", runtime=None, **cfg):
        self.runtime = runtime or AsyncioRuntime()
        self.hub = Hub()
        self.peers = ";".join(PEERS.split(";")[:n])
        self.base_dir = str(base_dir)
        self.store_type = store_type
        self.cfg = cfg
        self.leader_event = threading.Event()
        self.role_changed = threading.Condition()
        self.changes = []
        self.servers = {}

    def make(self, node_id):
        cfg = DLedgerConfig(group="t", self_id=node_id, peers=self.peers, store_base_dir=self.base_dir,
                            store_type=self.store_type, mapped_file_size_for_entry_data=1 << 22,
                            mapped_file_size_for_entry_index=32 * 65536, **self.cfg)
        s = DLedgerServer(cfg, runtime=self.runtime, hub=self.hub)
        s.add_role_change_handler(lambda ch, s=s: self._on_change(s, ch))
        self.servers[node_id] = s
        return s

    def _on_change(self, s, ch):
        self.changes.append((s.config.self_id, ch))
        if ch.role is Role.LEADER:
            self.leader_event.set()
        with self.role_changed:
            self.role_changed.notify_all()

    def start_all(self):
        for node_id in [p.split("-")[0] for p in self.peers.split(";")]:
            self.make(node_id).startup()
        return self

    def current_leader(self):
        """The started server leading in the highest term any started server has seen, or None
        (a deposed leader that has not yet heard of the newer term is not returned)."""
        started = [s for s in self.servers.values() if s.started and s.node is not None]
        if not started:
            return None
        top = max(s.node.term for s in started)
        return next((s for s in started if s.is_leader and s.node.term == top), None)

    def leader(self, timeout=10.0):
        """Waits (on role changes, re-checking every 50 ms) until a server leads in the newest term:
        under load an election may take several rounds, and a leader may be deposed at any time."""
        deadline = time.monotonic() + timeout
        with self.role_changed:
            while (lead := self.current_leader()) is None:
                left = deadline - time.monotonic()
                assert left > 0, f"no leader elected within {timeout} s"
                self.role_changed.wait(min(left, 0.05))
        return lead

    def append_certainly(self, body, timeout=15.0):
        """Appends through whichever server leads, trying again only after NOT_LEADER or
        LEADER_TRANSFERRING (answers given before the entry was taken, so a retry cannot store it
        twice); any other answer is returned as it is."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.leader(max(0.1, deadline - time.monotonic())).append(body).result(timeout)
            if r.code not in (Code.NOT_LEADER, Code.LEADER_TRANSFERRING) or time.monotonic() > deadline:
                return r

    def stop_all(self):
        for s in self.servers.values():
            s.shutdown()
        self.runtime.close()


@pytest.fixture
def group(tmp_path):
    g = Group(tmp_path).start_all()
    yield g
    g.stop_all()


def test_three_servers_elect_replicate_and_serve_reads(group):
    lead = group.leader()
    futures = [lead.append(b"hello-%d" % i) for i in range(100)]
    rs = [f.result(5) for f in futures]
    assert [r.code for r in rs] == [Code.SUCCESS] * 100
    assert [r.index for r in rs] == list(range(100))
    assert lead.get(42).body == b"hello-42"
    meta = lead.metadata()
    assert meta["role"] == "LEADER" and meta["committed_index"] == 99 and len(meta["peers"]) == 3
    for mode in ReadMode:
        assert lead.read(mode).result(5).code == Code.SUCCESS


def test_a_cancelled_future_only_drops_its_answer_the_append_still_happens(group, caplog):
    lead = group.leader()
    futures = [lead.append(b"c-%d" % i) for i in range(200)]
    cancelled = [f.cancel() for f in futures[::2]]
    last = lead.append(b"after").result(5)
    assert last.code == Code.SUCCESS and last.index == 200
    for i, f in enumerate(futures):
        if i % 2 == 0 and cancelled[i // 2]:
            assert f.cancelled()
        else:
            assert f.result(5).index == i
    assert [lead.get(i).body for i in range(200)] == [b"c-%d" % i for i in range(200)]
    assert any(cancelled)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "a cancelled future is not an error"


def test_append_hooks_can_stamp_the_position_into_the_body(tmp_path):
    g = Group(tmp_path)
    for node_id in ("n0", "n1", "n2"):
        s = g.make(node_id)
        s.add_append_hook(lambda entry, view, off: struct.pack_into(">q", view, off, entry.pos))
        s.startup()
    try:
        lead = g.leader()
        r = lead.append(bytes(8) + b"payload").result(5)
        assert r.code == Code.SUCCESS
        body = lead.get(r.index).body
        assert struct.unpack_from(">q", body)[0] == r.pos and body[8:] == b"payload"
    finally:
        g.stop_all()


def test_batch_append_and_state_machine_writes(tmp_path):
    class Sum:
        def __init__(self):
            self.total = 0

        def on_apply(self, entries):
            for a in entries:
                self.total += int(a.entry.body)
                a.resp = self.total

    g = Group(tmp_path)
    for node_id in ("n0", "n1", "n2"):
        s = g.make(node_id)
        s.register_state_machine(Sum())
        s.startup()
    try:
        lead = g.leader()
        r = lead.batch_append([b"1", b"2", b"3"]).result(5)
        assert r.code == Code.SUCCESS and r.index == 2 and len(r.positions) == 3
        resp, total = lead.write(b"10").result(5)
        assert resp.code == Code.SUCCESS and total == 16
        with pytest.raises(RuntimeError):
            lead.register_state_machine(Sum())
    finally:
        g.stop_all()


def test_leadership_transfer_and_failover(group):
    lead = group.leader()
    lead.append(b"x").result(5)
    target = next(s for s in group.servers.values() if s is not lead)
    # wait until the target follows the leader (a role change names it), then hand over
    follows = threading.Event()
    target.add_role_change_handler(lambda ch: ch.leader_id == lead.config.self_id and follows.set())
    if target.leader_id == lead.config.self_id:
        follows.set()
    assert follows.wait(5), f"{target.config.self_id} does not follow {lead.config.self_id}: {target.metadata()}"
    group.leader_event.clear()
    assert lead.transfer_leadership(target.config.self_id).result(5).code == Code.SUCCESS
    assert target.is_leader
    group.leader_event.clear()
    target.shutdown()
    new = group.leader()
    assert new is not target and new.append(b"after failover").result(5).code == Code.SUCCESS


def test_restart_from_disk_keeps_the_log(tmp_path):
    # Real-time elections: under load a leader may be deposed mid-stream. An append refused before
    # it was taken is sent again; one whose outcome is unclear (EXPIRED_TERM, ack timeout) is not,
    # so only acknowledged entries are checked by index, and with no leader change all 20 are.
    g = Group(tmp_path).start_all()
    acked, unclear = {}, 0
    for i in range(20):
        r = g.append_certainly(b"%d" % i)
        if r.code == Code.SUCCESS:
            acked[r.index] = b"%d" % i
        else:
            assert r.code in (Code.EXPIRED_TERM, Code.WAIT_QUORUM_ACK_TIMEOUT), r
            unclear += 1
    assert acked and len(acked) == 20 - unclear
    if not unclear:
        assert sorted(acked) == list(range(20))
    runtime = g.runtime
    for s in g.servers.values():
        s.shutdown()
    g2 = Group(tmp_path, runtime=runtime).start_all()
    try:
        r = g2.append_certainly(b"more")
        assert r.code == Code.SUCCESS and r.index >= max(acked) + 1
        if not unclear:
            assert r.index == 20
        lead = g2.leader()
        assert {i: lead.get(i).body for i in acked} == acked
        assert lead.get(r.index).body == b"more"
    finally:
        g2.stop_all()


def test_async_twins_on_the_hosts_own_loop(tmp_path):
    async def main():
        g = Group(tmp_path, store_type="memory", runtime=AsyncioRuntime(loop=asyncio.get_running_loop()))
        changed = asyncio.Event()
        for node_id in ("n0", "n1", "n2"):
            s = g.make(node_id)
            s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and changed.set())
            s.startup()
        await asyncio.wait_for(changed.wait(), 5)
        lead = next(s for s in g.servers.values() if s.is_leader)
        r = await lead.append_async(b"async")
        assert r.code == Code.SUCCESS
        assert (await lead.get_async(r.index)).body == b"async"
        assert (await lead.read_async(ReadMode.LEASE_READ)).code == Code.SUCCESS
        assert (await lead.metadata_async())["leader_id"] == lead.config.self_id
        for s in g.servers.values():
            s.shutdown()

    asyncio.run(main())


def test_local_misuse_raises_at_once(tmp_path):
    g = Group(tmp_path)
    s = g.make("n0")
    with pytest.raises(RuntimeError):
        s.append(b"x")
    s.startup()
    try:
        with pytest.raises(TypeError):
            s.append("not bytes")
        with pytest.raises(ValueError):
            s.batch_append([])
    finally:
        g.stop_all()


def test_a_follower_refuses_appends_with_the_leader_hint(group):
    lead = group.leader()
    lead.append(b"x").result(5)
    follower = next(s for s in group.servers.values() if s is not lead)
    r = follower.append(b"y").result(5)
    assert r.code == Code.NOT_LEADER


def test_wait_for_leader_returns_the_leader_on_every_node_and_none_without_a_quorum(tmp_path):
    group = Group(tmp_path).start_all()
    try:
        seen = {s.wait_for_leader(timeout=10) for s in group.servers.values()}
        assert len(seen) == 1 and seen.pop() in group.servers
    finally:
        group.stop_all()
    lonely = Group(tmp_path / "lonely", n=3)
    lonely.make("n0").startup()  # its peers never start: no leader can be elected
    try:
        assert lonely.servers["n0"].wait_for_leader(timeout=0.5) is None
        assert lonely.servers["n0"]._role_handlers[-1].__name__ != "on_change"
    finally:
        lonely.stop_all()


def test_a_running_file_server_refuses_appends_while_the_disk_is_full_and_resumes(tmp_path):
    """The server runs the store's cleaning pass every 100 ms (Java's CleanSpaceService period); its disk-full guard
    turns appends into DISK_FULL until space comes back."""
    group = Group(tmp_path, n=1)
    server = group.make("n0").startup()
    try:
        assert server.wait_for_leader(timeout=10) == "n0"
        assert server.append(b"before").result(timeout=10).ok
        usage = {"ratio": 0.95}

        def fake_usage(path):
            used = int(1000 * usage["ratio"])
            return (1000, used, 1000 - used)

        store = server.store
        real_clean = store.clean
        cleaned = threading.Event()

        def clean(now=None):
            deleted = real_clean(now)
            cleaned.set()
            return deleted

        def install():
            store._retention.disk_usage = fake_usage
            store.clean = clean

        server.runtime.run_sync(install)
        assert cleaned.wait(5), "the server did not run a cleaning pass"
        refused = server.append(b"refused").result(timeout=10)
        assert refused.code == Code.DISK_FULL
        assert server.get(0).body == b"before"  # reads go on
        usage["ratio"] = 0.5
        for _ in range(2):  # the second pass surely started after the change
            cleaned.clear()
            assert cleaned.wait(5)
        accepted = server.append(b"after").result(timeout=10)
        assert accepted.ok and server.get(accepted.index).body == b"after"
    finally:
        group.stop_all()


def test_a_running_server_whose_disk_fails_halts_and_answers_disk_error(tmp_path):
    """On the real runtime: a failed msync halts the node at once (fail-stop); every call ends
    with DISK_ERROR, a halt handler hears it once, and a new server on the reopened store is
    the way back."""
    from dledger.sim.disk import PowerLoss

    pl = PowerLoss()
    runtime = AsyncioRuntime()
    cfg = DLedgerConfig(group="t", self_id="n0", peers="n0-127.0.0.1:20911", store_base_dir=str(tmp_path),
                        durability="fsync", mapped_file_size_for_entry_data=1 << 20,
                        mapped_file_size_for_entry_index=32 * 8192)
    server = DLedgerServer(cfg, runtime=runtime, hub=Hub(), store_io=pl.io)
    halts = []
    halted = threading.Event()
    server.add_halt_handler(lambda reason: (halts.append(reason), halted.set()))
    server.startup()
    try:
        assert server.wait_for_leader(timeout=10) == "n0"
        assert server.append(b"before").result(timeout=10).ok
        pl.fail_syncs(None)
        failed = server.append(b"during").result(timeout=10)
        assert failed.code == Code.DISK_ERROR
        assert halted.wait(5) and len(halts) == 1 and "msync" in halts[0]
        assert server.halted == halts[0]
        assert server.append(b"after").result(timeout=10).code == Code.DISK_ERROR
        assert server.read(ReadMode.UNSAFE_READ).result(timeout=10).code == Code.DISK_ERROR
        assert server.transfer_leadership("n0").result(timeout=10).code == Code.DISK_ERROR
        server.shutdown()                                     # harmless on a halted node
        pl.heal_syncs()
        again = DLedgerServer(cfg, runtime=runtime, hub=Hub(), store_io=pl.io).startup()
        assert again.halted is None and again.wait_for_leader(timeout=10) == "n0"
        resp = again.append(b"after restart").result(timeout=10)
        assert resp.ok and again.get(0).body == b"before"
        again.shutdown()
    finally:
        runtime.close()


def test_get_reads_the_local_store_by_default_and_confirms_leadership_in_the_other_modes(group):
    """``get(index)`` reads the node's own store (any role); ``get(index, mode)`` in a
    linearizable mode first confirms, as ``read(mode)``, that the node leads."""
    from dledger.errors import DLedgerError
    from transport.tcp_helpers import when
    lead = group.leader()
    r = lead.append(b"g").result(5)
    follower = next(s for s in group.servers.values() if s is not lead)
    assert when(follower, lambda s: s.node.committed_index >= r.index).wait(5), "the follower never learnt the commit"
    assert follower.get(r.index).body == b"g" and follower.get(r.index, "unsafe_read").body == b"g"
    for mode in ReadMode:
        assert lead.get(r.index, mode).body == b"g", mode
        with pytest.raises(DLedgerError) as exc:
            lead.get(r.index + 5, mode)
        assert exc.value.code == Code.INDEX_OUT_OF_RANGE, mode
        if mode is not ReadMode.UNSAFE_READ:
            with pytest.raises(DLedgerError) as exc:
                follower.get(r.index, mode)
            assert exc.value.code == Code.NOT_LEADER, mode
    with pytest.raises(ValueError, match="read mode"):
        lead.get(r.index, "fast")
    with pytest.raises(TypeError):
        lead.get("0", ReadMode.READ_INDEX_READ)

    async def both():
        return [(await lead.get_async(r.index, mode)).body for mode in ReadMode]

    assert asyncio.run(both()) == [b"g"] * len(ReadMode)
