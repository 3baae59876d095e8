"""No ``asyncio.wait_for`` in the package, the benchmarks or the examples: on Python 3.11 (the
oldest we support) it returns the inner result and drops a cancellation that arrives in the turn
the inner awaitable completes, so a Ctrl-C or a shutdown that comes then is lost and the program
runs on (the demo's Ctrl-C was lost once in about seventy runs on a loaded machine). A time limit
is ``async with asyncio.timeout(seconds):`` around the await, which keeps the cancellation."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKED = ("src", "benchmarks", "examples")


def wait_for_uses(tree: ast.AST) -> list[int]:
    """The lines that call ``asyncio.wait_for`` or import ``wait_for`` from asyncio."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in ("asyncio", "asyncio.tasks") and any(
                a.name == "wait_for" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_asyncio_wait_for_in_the_package_the_benchmarks_or_the_examples():
    bad = []
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            bad.extend(f"{path.relative_to(ROOT)}:{line}" for line in wait_for_uses(ast.parse(path.read_text())))
    assert not bad, "asyncio.wait_for (use `async with asyncio.timeout(...)`): " + ", ".join(bad)


def test_the_rule_sees_each_form_and_leaves_others_alone():
    bad = ast.parse("import asyncio\nasync def f(x):\n    return await asyncio.wait_for(x, 1)\n"
                    "from asyncio import wait_for\n")
    good = ast.parse("import asyncio\nasync def f(s, c):\n    async with asyncio.timeout(1):\n"
                     "        await c.wait_for(lambda: True)\n    s.wait_for_leader(1)\n")
    assert wait_for_uses(bad) == [3, 4]
    assert wait_for_uses(good) == []
