"""The named set-ups a run marker can ask for (``setup=NAME``): what a block takes as given.

Each one prepares the block's directory and returns the variables the block's ``sub`` option
may name (``$NAME``), which a shell block also finds in its environment.

- ``replicas``: ``$REPLICAS/dledger-n0``, ``-n1``, ``-n2``, three identical replicas of a
  group's log (120 entries in term 1, all committed), as ``make run`` leaves them.
- ``broker-store``: ``$BROKER_STORE``, a broker's store: 40 messages of the topics ``orders``
  and ``payments``, with tags.
- ``server``: a Python block runs after a started ``DLedgerServer`` named ``server`` (a group
  of one, bootstrapped, that has elected itself), which is shut down after the block.
- ``spark``: a Python or SQL block runs in the test process, in the run's one local
  SparkSession (named ``spark``), with ``dledger.spark`` registered.
- ``rocketmq-4``, ``rocketmq-5``: ``$CLIENT_VENV``, a virtualenv holding RocketMQ's 4.x client
  (PyPI ``rocketmq`` 0.4.4) or its 5.x one (``rocketmq-python-client`` 5.1.2): the tests'
  cached one (``helpers.client_venvs``, made on first use), for a block that makes its own
  with pip (its ``sub`` puts this one in its place).
"""

from __future__ import annotations

import pathlib

from dledger.broker.message_codec import encode_message
from dledger.entry import MAGIC_NOOP
from dledger.store import DLedgerMmapFileStore
from dledger.transport.loopback import free_ports

SEGMENT = 64 * 1024


def _store(path: pathlib.Path, bodies: list[bytes], *, noop_first: bool = False) -> None:
    store = DLedgerMmapFileStore.open(str(path), data_file_size=SEGMENT, index_file_size=32 * 256)
    store.persist_term(1, None)
    if noop_first:
        store.batch_append_as_leader([b""], magic=MAGIC_NOOP)
    store.batch_append_as_leader(bodies)
    store.update_committed_index(store.ledger_end_index)
    store.close()


def replicas(tmp: pathlib.Path) -> dict[str, str]:
    base = tmp / "replicas"
    for node in ("n0", "n1", "n2"):
        _store(base / f"dledger-{node}", [f"entry {i}".encode() for i in range(120)])
    return {"REPLICAS": str(base)}


def broker_store(tmp: pathlib.Path) -> dict[str, str]:
    path = tmp / "broker" / "dledger-n0"
    messages = [encode_message(topic="orders" if i % 2 else "payments", body=f"order-{i}".encode(),
                               queue_id=i % 4, queue_offset=i // 8, physical_offset=1000 + i,
                               born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_500 + i,
                               born_host=("192.168.1.20", 40000 + i), store_host=("10.1.2.3", 10911),
                               properties={"TAGS": f"tag{i % 3}", "KEYS": f"k{i}"})
                for i in range(40)]
    _store(path, messages, noop_first=True)
    return {"BROKER_STORE": str(path)}


def server_prelude(tmp: pathlib.Path) -> str:
    """Python that starts ``server`` before the block, and stops it after."""
    (port,) = free_ports(1)
    return (
        "import atexit\n"
        "from dledger import DLedgerConfig, DLedgerServer\n"
        f"server = DLedgerServer(DLedgerConfig(group='doc', self_id='n0', peers='n0-127.0.0.1:{port}',\n"
        f"    store_base_dir={str(tmp / 'server')!r}, bootstrap=True,\n"
        "    mapped_file_size_for_entry_data=1 << 22, mapped_file_size_for_entry_index=1 << 21))\n"
        "server.startup()\n"
        "atexit.register(server.shutdown)\n"
        "assert server.wait_for_leader(timeout=30) == 'n0'\n"
        "del atexit, DLedgerConfig, DLedgerServer\n")


def client_venv(kind: str):
    """The set-up of RocketMQ's client ``kind`` (``remoting`` or ``grpc``): its virtualenv."""

    def setup(tmp: pathlib.Path) -> dict[str, str]:
        from helpers.client_venvs import client_python

        return {"CLIENT_VENV": str(pathlib.Path(client_python(kind)).parents[1])}

    return setup


VARIABLES = {"replicas": replicas, "broker-store": broker_store,
             "rocketmq-4": client_venv("remoting"), "rocketmq-5": client_venv("grpc")}
