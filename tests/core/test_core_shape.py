"""The shape of the core, kept: components hold state and return intents (no callbacks are
handed to them), and every comparison of a term a peer sent is in one module
(``core/term_gate.py``).

Both rules are checked on the source with ``ast`` and on a running node, so that re-adding a
``send=``/``step_down=``/``lambda`` to a constructor, or an ``if req.term > ...`` to a part,
fails here with the file and line.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pathlib
import random

import pytest

from core.wiring import Wired
from dledger.config import DLedgerConfig
from dledger.core import Node, Role
from dledger.store import DLedgerMemoryStore

CORE = pathlib.Path(__file__).resolve().parents[2] / "src" / "dledger" / "core"

#: where the node builds its parts: every class constructed in these constructors is a component
#: (the elector and the pusher build the parts they compose)
BUILDERS = {"node.py": "Node", "leader_elector.py": "LeaderElector", "entry_pusher.py": "EntryPusher"}


def sources() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(CORE.glob("*.py"))}


def core_classes(trees: dict[str, ast.Module]) -> dict[str, ast.ClassDef]:
    return {node.name: node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def constructor_sites(trees, classes):
    """(file, call) for every constructor of a core class called in the builders' ``__init__``."""
    for fname, builder in BUILDERS.items():
        cls = next(c for c in ast.walk(trees[fname]) if isinstance(c, ast.ClassDef) and c.name == builder)
        init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
        for call in ast.walk(init):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in classes:
                yield fname, call


def constructor_calls(trees, classes):
    """(file, line, class built, argument) for every argument of every component constructor."""
    for fname, call in constructor_sites(trees, classes):
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            yield fname, call.lineno, call.func.id, arg


def components(trees, classes) -> set[str]:
    return {call.func.id for _f, call in constructor_sites(trees, classes)}


def callables_handed(trees) -> list[str]:
    """The arguments of component constructors that are callables: a lambda, a method of any
    core class reached through an attribute (``self.send``, ``self.elector.become_candidate``,
    ``recovery.may_follow``), or a function of a core module."""
    classes = core_classes(trees)
    methods = {f.name for cls in classes.values() for f in cls.body if isinstance(f, ast.FunctionDef)
               and not f.name.startswith("__")}
    functions = {f.name for tree in trees.values() for f in tree.body if isinstance(f, ast.FunctionDef)}
    found = []
    for fname, line, built, arg in constructor_calls(trees, classes):
        for sub in ast.walk(arg):
            if isinstance(sub, ast.Lambda) or isinstance(sub, ast.Attribute) and sub.attr in methods \
                    or isinstance(sub, ast.Name) and sub.id in functions:
                found.append(f"{fname}:{line}: {built}(... {ast.unparse(arg)} ...)")
                break
    return found


# =====================================================================================
# no callbacks
# =====================================================================================
def test_the_builders_build_the_components_we_know():
    trees = sources()
    built = components(trees, core_classes(trees))
    assert {"MemberState", "StateMachineCaller", "Rejoin", "RoundTrips", "LeaderElector", "EntryPusher",
            "EntryHandler", "DamagedTail", "Repairer", "ReadIndex", "Voting", "Heartbeats",
            "LeadershipTransfer", "InstallDispatch", "PushRanges"} <= built


def test_no_component_constructor_is_passed_a_callable_in_the_source():
    """No lambda, no method (of the builder or of another part), no function of a module is an
    argument of a component's constructor."""
    found = callables_handed(sources())
    assert found == [], "callables handed to components (return intents instead):\n" + "\n".join(found)


def test_no_component_takes_a_callable_parameter():
    """No constructor of a component declares a ``Callable`` parameter or a function default."""
    trees = sources()
    classes = core_classes(trees)
    found = []
    for name in components(trees, classes):
        init = next((f for f in classes[name].body if isinstance(f, ast.FunctionDef) and f.name == "__init__"),
                    None)
        if init is None:
            continue
        args = init.args
        for a in [*args.args, *args.kwonlyargs]:
            if a.annotation is not None and "Callable" in ast.unparse(a.annotation):
                found.append(f"{name}.__init__({a.arg}: {ast.unparse(a.annotation)})")
        for d in [*args.defaults, *args.kw_defaults]:
            if isinstance(d, ast.Lambda):
                found.append(f"{name}.__init__(... = {ast.unparse(d)})")
    assert found == []


def is_callback(value) -> bool:
    return inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value) \
        or isinstance(value, functools.partial)


def fields(obj) -> dict:
    """What an object holds (its ``__dict__``, or its slots)."""
    if hasattr(obj, "__dict__"):
        return vars(obj)
    return {k: getattr(obj, k) for cls in type(obj).__mro__ for k in getattr(cls, "__slots__", ())}


def test_a_node_hands_its_components_no_callable_and_they_hold_none(monkeypatch):
    """At run time: every argument given to a component's constructor is not callable, no
    request's context is callable, and after an election, appends and a leadership transfer no
    component holds a function or a bound method."""
    trees = sources()
    names = components(trees, core_classes(trees))
    seen: dict[str, list] = {}
    for path in sorted(CORE.glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"dledger.core.{path.stem}")
        for name, cls in vars(module).items():
            if name in names and inspect.isclass(cls) and cls.__module__ == module.__name__:
                seen[name] = []
                init = cls.__init__

                def recording(self, *args, _init=init, _name=name, **kwargs):
                    seen[_name].extend([*args, *kwargs.values()])
                    _init(self, *args, **kwargs)

                monkeypatch.setattr(cls, "__init__", recording)
    contexts = []
    send = Node.send

    def sending(self, peer, msg, ctx=None):
        contexts.append(ctx)
        return send(self, peer, msg, ctx)

    monkeypatch.setattr(Node, "send", sending)

    w = Wired(3, preferred_leader_ids="n2")
    assert set(seen) == names
    given = [(name, arg) for name, args in seen.items() for arg in args if callable(arg)]
    assert given == [], f"callables handed to components: {given}"

    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    w.propose(lead, "a", [b"x", b"y"])
    assert w.run_until(lambda: all(n.committed_index >= 1 for n in w.nodes.values()))
    assert w.run_until(lambda: w.leader() == "n2", 20_000)          # the preferred leader takes over
    assert contexts and not [c for c in contexts if callable(c)]
    for node in w.nodes.values():
        elector = node.elector
        parts = [node.member_state, node.recovery, node.round_trips, node.caller, elector, elector.voting,
                 elector.heartbeats, elector.reads, elector.transfer, node.pusher, node.pusher.installs,
                 node.pusher.ranges, node.handler, node.tail, node.repairer]
        held = [(type(p).__name__, k) for p in parts for k, v in fields(p).items() if is_callback(v)]
        assert held == [], f"{node.self_id}: components hold callbacks: {held}"


# =====================================================================================
# term comparisons in one module
# =====================================================================================
#: names of the node's own records whose ``term`` a part may compare with its current term:
#: the leadership a push was sent in (``self`` of the pusher, ``fwd`` of a forwarded transfer),
#: a heartbeat round, a vote round, an outstanding request, a role change. Anything else's
#: ``term`` is a term a peer sent, judged by the term gate.
OWN_RECORDS = {"self", "rnd", "tally", "rpc", "change", "fwd"}

#: the one exception, by module and name: relearning a lost term reads the terms the metadata
#: answers give (``core.rejoin``); those are facts asked for, not claims of a leadership
ANSWERS_RELEARNT_FROM = {("rejoin.py", "r")}


def term_comparisons(tree: ast.Module):
    """(line, base, expression) for every comparison, ``max`` or ``min`` in which a ``term``
    attribute takes part."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
            operands = list(node.args)
        else:
            continue
        for operand in operands:
            for sub in ast.walk(operand):
                if isinstance(sub, ast.Attribute) and sub.attr == "term":
                    yield node.lineno, ast.unparse(sub.value), ast.unparse(node)


def test_every_comparison_of_a_peers_term_is_in_the_term_gate():
    found = []
    for fname, tree in sources().items():
        if fname == "term_gate.py":
            continue
        for line, base, expr in term_comparisons(tree):
            if base not in OWN_RECORDS and (fname, base) not in ANSWERS_RELEARNT_FROM:
                found.append(f"{fname}:{line}: {expr}")
    assert found == [], "a term a peer sent compared outside core/term_gate.py:\n" + "\n".join(found)


def test_the_term_gate_compares_the_terms_of_requests_and_answers():
    lines = [expr for _line, base, expr in term_comparisons(sources()["term_gate.py"])]
    assert "resp.term > mine" in " ".join(lines)
    tree = sources()["term_gate.py"]
    order = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "order")
    assert [ast.unparse(c) for c in ast.walk(order) if isinstance(c, ast.Compare)] == ["theirs < mine",
                                                                                      "theirs > mine"]


@pytest.mark.parametrize("planted", [
    "if req.term > member.curr_term:\n    pass",
    "if member.curr_term < resp.term:\n    pass",
    "x = max(rnd.max_term, resp.term)",
    "if msg.term != self.member_state.curr_term:\n    pass",
])
def test_the_check_finds_a_term_comparison_planted_in_a_part(planted):
    tree = ast.parse(planted)
    assert [base for _l, base, _e in term_comparisons(tree) if base not in OWN_RECORDS]


@pytest.mark.parametrize("planted", ["step_down=self.elector.become_candidate", "fail=lambda token, code: None",
                                     "send=self.send", "lagging=recovery.may_follow",
                                     "timeout=election_timeout_ms"])
def test_the_check_finds_a_callback_planted_in_a_builder(planted):
    source = (CORE / "node.py").read_text()
    assert "self.pusher = EntryPusher(member, store, config, snapshots)" in source
    trees = sources()
    trees["node.py"] = ast.parse(source.replace("self.pusher = EntryPusher(member, store, config, snapshots)",
                                                f"self.pusher = EntryPusher(member, store, config, snapshots, {planted})"))
    trees["node.py"].body.insert(0, ast.parse("def election_timeout_ms(config): ...").body[0])
    found = [f.split("EntryPusher(... ")[1] for f in callables_handed(trees) if "EntryPusher(" in f]
    assert found == [planted.split("=")[1] + " ...)"]


def test_a_lone_node_needs_no_wiring_to_lead():
    cfg = DLedgerConfig(self_id="n0", peers="n0-h:1", group="g").validate()
    node = Node(cfg, DLedgerMemoryStore(data_file_size=1 << 16, suspect=None), random.Random(1))
    for now in range(0, 2000, 10):
        node.tick(now)
        node.take_ready()
    assert node.role is Role.LEADER
