"""Snapshots on the real runtime: the state machine writes on a worker thread while the event
loop goes on serving (these tests wait on events the state machine sets, not on time)."""

from __future__ import annotations

import threading

from dledger import DLedgerConfig, DLedgerServer
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.loopback import free_ports


class Gated:
    """Sums its entries; a save waits until ``release`` is set. With ``view``, it gives a
    point-in-time view (``snapshot_state``) and applying goes on during the save."""

    def __init__(self, view: bool = False) -> None:
        self.total = 0
        self.saving = threading.Event()
        self.release = threading.Event()
        self.save_thread = None
        if view:
            self.snapshot_state = lambda: self.total

    def on_apply(self, entries):
        for e in entries:
            self.total += int(bytes(e.entry.body))
            e.resp = self.total

    def on_snapshot_save(self, writer, view=None):
        self.save_thread = threading.current_thread()
        self.saving.set()
        assert self.release.wait(10)
        writer.write(str(self.total if view is None else view).encode())

    def on_snapshot_load(self, reader):
        self.total = int(reader.read())


def start(tmp_path, sm):
    port = free_ports(1)[0]
    cfg = DLedgerConfig(group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_base_dir=str(tmp_path))
    rt = AsyncioRuntime()
    server = DLedgerServer(cfg, runtime=rt, state_machine=sm).startup()
    assert server.wait_for_leader(timeout=10) == "n0"
    return server, rt


def test_a_save_runs_off_the_loop_and_appends_complete_after_it(tmp_path):
    sm = Gated()
    server, rt = start(tmp_path, sm)
    try:
        assert server.append(b"1").result(5).ok
        snap = server.snapshot()
        assert sm.saving.wait(5)
        assert sm.save_thread is not threading.main_thread() and sm.save_thread.name.startswith("dledger-snapshot")
        pending = server.append(b"2")
        # the loop serves while the state machine writes: the entry is in the log, unapplied
        assert server.metadata()["ledger_end_index"] == 1
        assert not pending.done() and sm.total == 1
        sm.release.set()
        assert snap.result(5) == 0
        assert pending.result(5).ok and sm.total == 3
    finally:
        sm.release.set()
        server.shutdown()
        rt.close()


def test_with_a_view_applying_goes_on_during_the_save(tmp_path):
    sm = Gated(view=True)
    server, rt = start(tmp_path, sm)
    try:
        assert server.append(b"5").result(5).ok
        snap = server.snapshot()
        assert sm.saving.wait(5)
        assert server.append(b"7").result(5).ok and sm.total == 12     # applied during the save
        sm.release.set()
        assert snap.result(5) == 0
    finally:
        sm.release.set()
        server.shutdown()
        rt.close()
    restarted = Gated()
    server, rt = start(tmp_path, restarted)
    try:
        assert restarted.total == 12      # the snapshot (5, of entry 0) and entry 1 replayed
    finally:
        server.shutdown()
        rt.close()
