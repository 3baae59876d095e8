"""Every recipe of README.md and docs/*.md runs as written and prints what the doc shows.

The first tests keep the rule: every shell or Python block carries a marker, and a marker
reads as docs/writing-docs.md describes. Then one test per runnable unit: a block, or the
blocks of one ``session=NAME`` of a file, in the doc's order, in one shell.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from recipes import setups
from recipes.blocks import Block, MarkerError, Marker, all_blocks, blocks_of, matches, mismatch, session_steps
from recipes.blocks import ROOT
from recipes.runner import Substitution, environment, run_session, run_whole, workdir

BLOCKS = all_blocks()


def units() -> list[list[Block]]:
    found: dict[tuple, list[Block]] = {}
    for block in BLOCKS:
        if block.marker and block.marker.kind == "run" and not block.marker.by:
            key = (block.path, block.marker.session) if block.marker.session else (block.where,)
            found.setdefault(key, []).append(block)
    return list(found.values())


UNITS = units()


def test_every_shell_and_python_block_is_marked_run_or_no_run():
    unmarked = [b.where for b in BLOCKS if b.must_mark and b.marker is None]
    assert unmarked == [], ("blocks with no <!-- run ... --> or <!-- no-run: reason --> on the line "
                            "above their fence (docs/writing-docs.md): " + ", ".join(unmarked))


def test_a_block_run_by_another_test_names_a_test_that_reads_its_doc():
    by = [b for b in BLOCKS if b.marker and b.marker.by]
    for block in by:
        test = ROOT / block.marker.by
        assert test.is_file(), f"{block.where}: by={block.marker.by}, which does not exist"
        assert block.path.name in test.read_text(), f"{block.where}: {block.marker.by} does not read {block.path.name}"


def test_the_docs_run_most_of_their_blocks():
    marked = [b for b in BLOCKS if b.marker]
    assert len([b for b in marked if b.marker.kind == "run"]) >= 20, len(marked)


@pytest.mark.parametrize("line, marker", [
    ("<!-- run -->", Marker("run")),
    ("<!-- run timeout=90 setup=replicas output -->", Marker("run", timeout=90, setups=["replicas"], output=True)),
    ("<!-- run sub='/var/lib/app=>$TMP/app' ports=21911,21912 -->",
     Marker("run", subs=[("/var/lib/app", "$TMP/app")], ports=[21911, 21912])),
    ("<!-- no-run: runs for two hours: `make soak` -->", Marker("no-run", reason="runs for two hours: `make soak`")),
    ("<!-- a comment -->", None),
])
def test_markers_read_as_written(line, marker):
    assert Marker.parse(line, "x.md:1") == marker


@pytest.mark.parametrize("line, error", [
    ("<!-- no-run -->", "no-run needs a reason"),
    ("<!-- run timout=5 -->", "unknown run option 'timout'"),
    ("<!-- run setup=spark,cluster -->", "unknown setup 'cluster'"),
    ("<!-- run sub=/a -->", "sub takes 'OLD=>NEW'"),
    ("<!-- run", "does not end on its line"),
])
def test_a_bad_marker_is_named(line, error):
    with pytest.raises(MarkerError, match=error):
        Marker.parse(line, "x.md:1")


def test_an_unmarked_block_is_found_with_its_file_and_line(tmp_path, monkeypatch):
    doc = ROOT / "docs" / "x-unmarked.md"
    monkeypatch.setattr("recipes.blocks.ROOT", tmp_path)
    path = tmp_path / "x.md"
    path.write_text("text\n\n```\n$ dledger status\n```\n\n<!-- no-run: an example -->\n```python\nx = 1\n```\n"
                    "\n```\nan output\n```\n")
    found = blocks_of(path)
    assert [(b.line, b.must_mark, b.marker is None) for b in found] == [(3, True, True), (8, True, False),
                                                                       (12, False, True)]
    assert found[0].where == "x.md:3" and not doc.exists()


@pytest.mark.parametrize("expected, actual, ok", [
    (["a 1 b"], ["a 1 b"], True),
    (["a ... b"], ["a 123 b"], True),
    (["a ... b"], ["a 123 c"], False),
    (["x", "...", "z"], ["x", "z"], True),
    (["x", "...", "z"], ["x", "1", "2", "z"], True),
    (["x", "...", "z"], ["x", "1", "2"], False),
    (["x"], ["x", "y"], False),
    (["x", "y"], ["x"], False),
    (["n2 leads (term ...)"], ["n2 leads (term 1)"], True),
    (["a.b"], ["aXb"], False),
])
def test_the_wildcards(expected, actual, ok):
    assert matches(expected, actual) is ok


def test_session_steps_join_continued_lines():
    steps = session_steps("$ a \\\n    b\nout 1\nout 2\n$ c\n")
    assert steps == [("a \\\n    b", ["out 1", "out 2"]), ("c", [])]


def _spark_block(block: Block, text: str, cwd) -> list[str]:
    from helpers.local_spark import local_session

    import dledger.spark

    spark = local_session()                         # its JVM keeps the directory it started in
    dledger.spark.register(spark)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(cwd):   # what the block writes goes there
        if block.lang == "sql":
            for statement in filter(str.strip, text.split(";")):
                spark.sql(statement).show()
        else:
            exec(compile(text, block.where, "exec"), {"spark": spark, "__name__": "__doc_block__"})
    return out.getvalue().splitlines()


@pytest.mark.parametrize("unit", UNITS, ids=[u[0].where for u in UNITS])
def test_the_block_runs_and_prints_what_the_doc_shows(unit, tmp_path):
    first = unit[0]
    cwd = workdir(tmp_path)
    variables = {}
    for block in unit:
        for name in block.marker.setups:
            if name in setups.VARIABLES:
                variables.update(setups.VARIABLES[name](tmp_path))
    subst = Substitution(unit, variables, tmp_path)
    env = environment(tmp_path, variables)
    if first.is_session:
        assert all(b.is_session for b in unit), f"{first.where}: a session mixes prompts and scripts"
        run_session(unit, subst, cwd, env)
        return
    (block,) = unit
    text = subst.apply(block)
    if "spark" in block.marker.setups:
        lines = [subst.back(line) for line in _spark_block(block, text, cwd)]
    else:
        prelude = setups.server_prelude(tmp_path) if "server" in block.marker.setups else ""
        lines = run_whole(block, text, subst, cwd, env, prelude)
    if block.expected is not None:
        expected = block.expected.splitlines()
        assert matches(expected, lines), mismatch(block.where, expected, lines)
