"""The core's components hold state, not the node: none holds the ``Node``, and only
``LeaderElector`` and ``EntryPusher`` hold other components (the parts they compose). That they are handed no
callables at all is tests/core/test_core_shape.py."""

import ast
import pathlib
import random

from dledger.config import DLedgerConfig
from dledger.core import Node
from dledger.core.entry_handler import EntryHandler
from dledger.core.entry_pusher import EntryPusher
from dledger.core.heartbeat import Heartbeats
from dledger.core.install_dispatch import InstallDispatch
from dledger.core.leader_elector import LeaderElector
from dledger.core.leadership_transfer import LeadershipTransfer
from dledger.core.push_ranges import PushRanges
from dledger.core.read_index import ReadIndex
from dledger.core.vote import Voting
from dledger.store import DLedgerMemoryStore

CORE = pathlib.Path(__file__).resolve().parents[2] / "src" / "dledger" / "core"
COMPONENTS = (LeaderElector, EntryPusher, EntryHandler, Voting, Heartbeats, ReadIndex, LeadershipTransfer,
              InstallDispatch, PushRanges)


def node() -> Node:
    cfg = DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3", group="g").validate()
    return Node(cfg, DLedgerMemoryStore(data_file_size=1 << 16, suspect=None), random.Random(1))


def held(obj) -> list:
    return list(vars(obj).values())


def test_no_component_holds_the_node_or_another_component():
    n = node()
    elector = n.elector
    parts = [elector.voting, elector.heartbeats, elector.reads, elector.transfer, n.pusher.installs, n.pusher.ranges]
    for component in [n.handler, *parts]:
        for value in held(component):
            assert not isinstance(value, Node), (component, value)
            assert not isinstance(value, COMPONENTS), (component, value)
            assert getattr(value, "__self__", None) is not n, (component, value)     # no bound Node method
    for composer in (elector, n.pusher):
        assert not any(isinstance(v, Node) for v in held(composer))
    assert {type(v) for v in held(elector) if isinstance(v, COMPONENTS)} == {Voting, Heartbeats, ReadIndex,
                                                                            LeadershipTransfer}
    assert {type(v) for v in held(n.pusher) if isinstance(v, COMPONENTS)} == {InstallDispatch, PushRanges}


def test_only_the_node_module_and_the_package_import_the_node():
    for path in sorted(CORE.glob("*.py")):
        if path.name in ("node.py", "__init__.py"):
            continue
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.ImportFrom):
                assert stmt.module != "dledger.core.node", path.name


def test_the_member_state_is_node_member_state():
    n = node()
    assert n.member_state is n.elector.member_state is n.pusher.member_state is n.handler.member_state
    assert not hasattr(n, "ms")
