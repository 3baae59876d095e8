"""The layering rule of STYLE.md, enforced with ``ast``: imports point down only, the core
never touches time, sockets, threads, asyncio or a global random, nothing but ``sim`` and
``cli`` imports the simulator, and ``pyspark`` is imported only inside ``dledger.spark``
functions."""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "dledger"

LOWER = {"errors", "config", "progress_bar", "entry", "store", "snapshot", "protocol", "core", "transport", "runtime",
         "server_membership", "server"}
ALLOWED = {
    "errors": set(),
    "config": set(),
    "progress_bar": set(),
    "entry": {"errors"},
    "store": {"store", "entry", "errors"},
    "snapshot": {"snapshot", "store", "entry", "errors"},
    "protocol": {"entry", "errors"},
    "core": {"core", "store", "snapshot", "protocol", "entry", "errors", "config"},
    "transport": {"transport", "protocol", "errors"},
    "runtime": {"runtime", "core", "transport", "protocol", "entry", "errors", "config"},
    # the server's membership methods (a mixin of DLedgerServer, in a module of their own)
    "server_membership": {"runtime", "protocol", "errors"},
    "server": {"server", "server_membership", "runtime", "core", "transport", "protocol", "store", "snapshot",
               "entry", "errors", "config"},
    # the package exports the client too (an edge module that itself imports only lower layers)
    "__init__": LOWER | {"client"},
}
# demo is the cli's main job: like the cli it may call the Spark audit (lazily, inside a function),
# and it drives its node processes through the client.
# spark reads broker messages with the broker's codec (dledger.broker.message_codec, its one home).
# the broker keeps its dispatch lag in a metrics Histogram.
# the name server speaks the broker's remoting protocol (dledger.broker.remoting, its one codec).
EDGE_EXTRA = {"cli": {"*"}, "demo": {"progress_bar", "spark", "client"}, "sim": set(), "spark": {"broker"}, "client": set(),
               "broker": {"metrics"}, "bench": {"client", "broker"}, "namesrv": {"broker"}}
CORE_BANNED = {"time", "asyncio", "socket", "threading", "random", "selectors", "subprocess"}


def modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        layer = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        yield path, layer, ast.parse(path.read_text(), str(path))


def imports(tree):
    """(module name, node, inside a function?) for every import."""
    out = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            f = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child, f) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.extend((f"{child.module}.{a.name}" if child.module == "dledger" else child.module, child, f)
                           for a in child.names)
            visit(child, f)

    visit(tree, False)
    return out


def allowed_for(layer):
    if layer in ALLOWED:
        return ALLOWED[layer]
    return LOWER | {layer} | EDGE_EXTRA.get(layer, set())


def test_imports_point_down_only():
    bad = []
    for path, layer, tree in modules():
        ok = allowed_for(layer)
        for name, node, _f in imports(tree):
            parts = name.split(".")
            if parts[0] != "dledger" or len(parts) < 2:
                continue
            target = parts[1]
            if target == "__version__":
                continue
            if "*" not in ok and target not in ok:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} ({layer}) imports dledger.{target}")
    assert not bad, "\n".join(bad)


def test_the_core_has_no_clock_socket_thread_asyncio_or_global_random():
    bad = []
    for path, layer, tree in modules():
        if layer != "core":
            continue
        for name, node, _f in imports(tree):
            if name.split(".")[0] in CORE_BANNED:
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} imports {name}")
    assert not bad, "\n".join(bad)


#: the transport's sans-IO parts: bytes in, events out, no I/O of their own (the simulator and
#: the TCP transport share them); tcp_setup is the one module that knows config field names,
#: and it reads them from the object it is given (transport never imports dledger.config)
TRANSPORT_SANS_IO = {"frames.py", "frame_views.py", "auth.py"}
IO_MODULES = {"asyncio", "socket", "selectors", "threading", "time", "subprocess"}


def test_the_frame_codec_and_the_handshake_do_no_io():
    bad = [f"{p.relative_to(SRC)}:{n.lineno} imports {name}" for p, layer, tree in modules()
           if layer == "transport" and p.name in TRANSPORT_SANS_IO
           for name, n, _f in imports(tree) if name.split(".")[0] in IO_MODULES]
    assert not bad, bad
    present = {p.name for p in (SRC / "transport").glob("*.py")}
    assert TRANSPORT_SANS_IO <= present


def test_only_sim_and_cli_import_the_simulator():
    bad = [f"{p.relative_to(SRC)}:{n.lineno}" for p, layer, tree in modules() if layer not in ("sim", "cli")
           for name, n, _f in imports(tree) if name.startswith("dledger.sim")]
    assert not bad, bad


def test_pyspark_only_inside_dledger_spark_and_never_when_it_is_imported():
    """pyspark lives in dledger.spark only. Its package __init__ imports pyspark only inside
    functions, so `import dledger.spark` works without pyspark; the submodules that subclass
    pyspark's DataSource import it at module level and are loaded lazily by those functions."""
    bad = [f"{p.relative_to(SRC)}:{n.lineno}" for p, layer, tree in modules()
           for name, n, in_func in imports(tree)
           if name.split(".")[0] == "pyspark"
           and (layer != "spark" or (p.name == "__init__.py" and not in_func))]
    assert not bad, bad
    init = ast.parse((SRC / "spark" / "__init__.py").read_text())
    eager = [name for name, _n, in_func in imports(init) if not in_func]
    assert all(not name.startswith(("pyspark", "dledger.spark.")) for name in eager), eager


def test_the_checker_sees_a_bad_import():
    tree = ast.parse("import time\nfrom dledger.server import DLedgerServer\n")
    names = [n for n, _node, _f in imports(tree)]
    assert names == ["time", "dledger.server"]
    assert "server" not in allowed_for("core")


# ---------------------------------------------------------------------------------------------
# no import cycles: a graph over the modules of src/dledger, every import counted (function-level
# and TYPE_CHECKING ones included: a lazy import hides a cycle, it does not remove it)
# ---------------------------------------------------------------------------------------------
def module_name(path, root=SRC):
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_targets(tree, name, is_package, known):
    """The modules of ``known`` that module ``name`` imports. ``from pkg import sub`` names
    the submodule when ``sub`` is one, else the package; relative imports are resolved."""
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {t for t in out if t in known and t != name}


def import_graph(root=SRC):
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    return {name: import_targets(ast.parse(p.read_text(), str(p)), name, p.name == "__init__.py",
                                 files) for name, p in files.items()}


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack = []

    def visit(n):
        color[n] = GREY
        stack.append(n)
        for m in sorted(graph[n]):
            if color[m] == GREY:
                return stack[stack.index(m):] + [m]
            if color[m] == WHITE:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        color[n] = BLACK
        return None

    for n in sorted(graph):
        if color[n] == WHITE:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycles_in_src():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_synthetic_cycle(tmp_path):
    pkg = tmp_path / "dledger"
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("from dledger.store.a import A\n")
    (pkg / "store" / "a.py").write_text("from dledger.store import b\nA = 1\n")
    (pkg / "store" / "b.py").write_text("def late():\n    from .c import C\n")
    (pkg / "store" / "c.py").write_text("from dledger.store.a import A as C\n")
    graph = import_graph(pkg)
    assert graph["dledger.store.b"] == {"dledger.store.c"}   # function-level, relative
    assert find_cycle(graph) == ["dledger.store.a", "dledger.store.b", "dledger.store.c",
                                 "dledger.store.a"]
    (pkg / "store" / "c.py").write_text("C = 1\n")
    assert find_cycle(import_graph(pkg)) is None
