"""A three-node broker group in this process (real runtime, in-process transport), each node
serving the remoting protocol on a loopback port: ``remoting_group`` yields it."""

import pytest

from dledger import DLedgerConfig, DLedgerServer
from dledger.broker import DLedgerCommitLog
from dledger.broker.remoting.server import RemotingServer
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.inproc import Hub
from helpers.polling import poll

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


class Group:
    def __init__(self, logs, servers):
        self.logs, self.servers = logs, servers

    def master(self) -> int:
        poll(lambda: sum(log.roles.writable for log in self.logs) == 1, timeout=60, what="one master")
        return next(i for i, log in enumerate(self.logs) if log.roles.writable)

    def slave(self) -> int:
        m = self.master()
        return (m + 1) % len(self.logs)


@pytest.fixture
def remoting_group(tmp_path):
    runtime, hub = AsyncioRuntime(), Hub()
    logs, servers = [], []
    try:
        for node_id in ("n0", "n1", "n2"):
            cfg = DLedgerConfig(group="broker-a", self_id=node_id, peers=PEERS, store_base_dir=str(tmp_path),
                                mapped_file_size_for_entry_data=1 << 22,
                                mapped_file_size_for_entry_index=32 * 65536, heart_beat_time_interval_ms=500)
            log = DLedgerCommitLog(DLedgerServer(cfg, runtime=runtime, hub=hub))
            log.server.startup()
            logs.append(log)
        for log in logs:
            servers.append(RemotingServer(log, "127.0.0.1", 0, broker_name="broker-a", put_timeout=5.0,
                                          max_connections=16, idle_s=3.0).start())
        group = Group(logs, servers)
        def published() -> bool:   # a master, its address published to every replica (an entry of the log)
            masters = [i for i, log in enumerate(logs) if log.roles.writable]
            return len(masters) == 1 and all(s.ctx.addresses.table.get(f"n{masters[0]}") == servers[masters[0]].address
                                             for s in servers)
        poll(published, timeout=60, what="the master's address on every replica")
        yield group
    finally:
        for s in servers:
            s.close()
        for log in logs:
            log.server.shutdown()
            log.close()
        runtime.close()
