"""The replica audit on real stores: clean replicas, a divergent tail, a lagging replica, a
flipped bit."""

import json
import os

import pytest

from dledger.entry import BODY_OFFSET
from dledger.spark.audit import (EXIT_CORRUPT, EXIT_DIVERGED, EXIT_ERROR, EXIT_OK, EXIT_UNKNOWN,
                                 run_audit)
from dledger.spark.audit_cli import main
from dledger.store import open_store
from spark_stores import (DATA_FILE_SIZE, bodies, flip_byte, java_entries, write_java_store,
                          write_store)

N = 300


def replicas(tmp_path, *, b_len=N, c_tail=None, committed=N - 1):
    """Three replicas of N entries; b may lag; c may end with a divergent tail in term 2."""
    common = bodies(N, seed=21)
    a = write_store(str(tmp_path / "a"), common, committed=committed)
    b = write_store(str(tmp_path / "b"), common[:b_len], committed=min(committed, b_len - 1))
    if c_tail:
        c = write_store(str(tmp_path / "c"), common[:N - c_tail], committed=committed,
                        more_terms=[(2, bodies(c_tail, seed=99))])
    else:
        c = write_store(str(tmp_path / "c"), common, committed=committed)
    return [a, b, c]


def test_clean_replicas_pass_and_write_json_and_png(dl, tmp_path):
    paths = replicas(tmp_path)
    out = tmp_path / "out"
    report = run_audit(paths, spark=dl, out_dir=str(out))
    assert report.exit_code == EXIT_OK and report.verdict == "OK"
    assert report.divergent_count == report.corrupt_count == report.gap_count == 0
    assert report.lagging == []
    assert report.common_prefix_end == report.common_committed_prefix_end == N - 1
    assert [(r.replica, r.first, r.last, r.entries, r.committed) for r in report.replicas] == \
        [(n, 0, N - 1, N, N - 1) for n in "abc"]
    data = json.loads((out / "audit.json").read_text())
    assert data["verdict"] == "OK" and data["replicas"][1]["entries"] == N
    png = (out / "audit.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    segs = {s["replica"]: 0 for s in data["segments"]}
    for s in data["segments"]:
        segs[s["replica"]] += s["entries"]
    assert segs == {"a": N, "b": N, "c": N}


def test_divergent_uncommitted_tail_is_reported_but_passes(dl, tmp_path):
    paths = replicas(tmp_path, c_tail=3, committed=N - 10)
    report = run_audit(paths, spark=dl)
    assert report.divergent_count == 3 and report.divergent_first == N - 3
    assert [d["index"] for d in report.divergent] == [N - 3, N - 2, N - 1]
    first = report.divergent[0]
    assert [(c["replica"], c["term"]) for c in first["copies"]] == [("a", 1), ("b", 1), ("c", 2)]
    assert not first["inside_committed_prefix"]
    assert report.committed_divergent_count == 0
    assert report.common_prefix_end == N - 4
    assert report.common_committed_prefix_end == N - 10
    assert report.exit_code == EXIT_OK
    # each replica's index range per term: c's new leader (term 2) began at N - 3
    assert report.replicas[0].terms == [{"term": 1, "first": 0, "last": N - 1, "entries": N}]
    assert report.replicas[2].terms == [
        {"term": 1, "first": 0, "last": N - 4, "entries": N - 3},
        {"term": 2, "first": N - 3, "last": N - 1, "entries": 3}]
    # the chart marks c's copies (the minority) as the divergent ones
    from dledger.spark.chart import divergent_ranges
    assert divergent_ranges(report) == {"a": [], "b": [], "c": [(N - 3, N - 1)]}


def test_divergence_inside_the_committed_prefix_fails(dl, tmp_path, capsys):
    paths = replicas(tmp_path, c_tail=3, committed=N - 10)
    report = run_audit(paths, spark=dl, committed=N - 1)
    assert report.committed_divergent_count == 3 and report.committed_divergent_first == N - 3
    assert report.exit_code == EXIT_DIVERGED and report.verdict.startswith("DIVERGED")
    code = main([*paths, "--committed", str(N - 2), "--out", str(tmp_path / "out")])
    assert code == EXIT_DIVERGED
    printed = capsys.readouterr().out
    assert "DIVERGED: 2 entries differ inside the committed prefix (first at index 297)" in printed
    assert (tmp_path / "out" / "audit.png").exists()


def test_lagging_replica_is_reported(dl, tmp_path):
    paths = replicas(tmp_path, b_len=N - 20)
    report = run_audit(paths, spark=dl)
    assert report.lagging == [{"replica": "b", "last": N - 21, "behind": 20}]
    assert report.common_prefix_end == N - 21
    assert report.divergent_count == 0 and report.gap_count == 0
    assert report.exit_code == EXIT_OK and "1 lagging replicas" in report.verdict


def test_flipped_bit_is_found(dl, tmp_path):
    paths = replicas(tmp_path)
    with open_store(paths[1]) as st:
        unit = st._reader.index_unit(50)
    seg = os.path.join(paths[1], "data", f"{unit.pos - unit.pos % DATA_FILE_SIZE:020d}")
    flip_byte(seg, unit.pos % DATA_FILE_SIZE + BODY_OFFSET + 5, 0x10)
    report = run_audit(paths, spark=dl, out_dir=str(tmp_path / "out"))
    assert report.corrupt_count == 1
    assert [(c["replica"], c["index"], c["pos"]) for c in report.corrupt] == [("b", 50, unit.pos)]
    assert report.divergent_count == 0 and report.gap_count == 1
    assert report.exit_code == EXIT_CORRUPT and report.verdict.startswith("CORRUPT")
    quick = run_audit(paths, spark=dl, recover=False)   # same findings without store recovery
    assert (quick.corrupt, quick.exit_code, quick.common_prefix_end) == \
        (report.corrupt, EXIT_CORRUPT, report.common_prefix_end)


def test_cli_audit_subcommand_runs_the_job(dl, tmp_path, capsys):
    from dledger.cli import main as cli_main

    paths = replicas(tmp_path)
    assert cli_main(["audit", *paths, "--out", str(tmp_path / "o")]) == EXIT_OK
    assert "audit of 3 replicas: OK" in capsys.readouterr().out
    assert cli_main(["audit", paths[0], str(tmp_path / "nope")]) == 2


def test_audit_needs_two_replicas(tmp_path):
    with pytest.raises(ValueError, match="at least two"):
        run_audit([str(tmp_path)])


def java_replicas(tmp_path, tail=3, n=60):
    """Two Java DLedger stores (no checkpoint); b's last ``tail`` entries differ (term 3)."""
    entries = java_entries(n)
    other = entries[:n - tail] + [(1, 3, bytes([i]) * 20) for i in range(tail)]
    a, b = str(tmp_path / "ja"), str(tmp_path / "jb")
    write_java_store(a, entries)
    write_java_store(b, other, current_term=3)
    return [a, b]


def test_divergence_without_any_known_commit_point_is_unknown(dl, tmp_path, capsys):
    paths = java_replicas(tmp_path)
    report = run_audit(paths, spark=dl)
    assert [r.committed for r in report.replicas] == [-1, -1]
    assert report.divergent_count == 3 and report.divergent_first == 57
    assert report.exit_code == EXIT_UNKNOWN
    assert report.verdict.startswith("UNKNOWN: 3 entries differ from index 57")
    assert main([*paths, "--out", str(tmp_path / "o")]) == EXIT_UNKNOWN
    assert "no replica knows its committed index" in capsys.readouterr().out
    # a committed index settles it either way
    assert run_audit(paths, spark=dl, committed=56).exit_code == EXIT_OK
    assert run_audit(paths, spark=dl, committed=57).exit_code == EXIT_DIVERGED


def test_identical_stores_without_commit_points_are_ok(dl, tmp_path):
    paths = java_replicas(tmp_path, tail=0)
    report = run_audit(paths, spark=dl)
    assert report.divergent_count == 0 and report.exit_code == EXIT_OK


def test_a_spark_failure_is_one_line_and_exit_2(tmp_path):
    # a fresh process whose JVM cannot start (a wrong JAVA_HOME): Spark fails, not the stores
    import subprocess
    import sys

    paths = replicas(tmp_path)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-java"),
               PYTHONPATH=os.path.abspath(src))
    proc = subprocess.run([sys.executable, "-m", "dledger.cli", "audit", *paths,
                           "--out", str(tmp_path / "o")], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == EXIT_ERROR, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("dledger audit")]
    assert len(lines) == 1 and "Spark failed" in lines[0] and "JAVA_GATEWAY_EXITED" in lines[0]
    assert "Traceback" not in proc.stderr
