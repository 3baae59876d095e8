"""``dledger read-file``, ``verify`` and ``audit`` on bad input: one line on stderr, exit 2,
no traceback, no Spark session (the audit fails before it would start one)."""

import pathlib
import sys

import pytest

from dledger.cli import main
from dledger.store import DLedgerMmapFileStore


def make_store(tmp_path, n=5):
    node = str(tmp_path / "dledger-n0")
    store = DLedgerMmapFileStore.open(node, data_file_size=4096, index_file_size=320)
    store.batch_append_as_leader([f"body-{i}".encode() for i in range(n)])
    store.close()
    return node


def one_error_line(capsys, command):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"dledger {command}: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("command", ["read-file", "verify"])
def test_a_missing_directory_is_one_line_and_exit_2(command, tmp_path, capsys):
    assert main([command, str(tmp_path / "nope")]) == 2
    assert "nope is not a directory" in one_error_line(capsys, command)


@pytest.mark.parametrize("command", ["read-file", "verify"])
def test_a_directory_that_is_not_a_store_is_one_line_and_exit_2(command, tmp_path, capsys):
    (tmp_path / "x").mkdir()
    assert main([command, str(tmp_path / "x")]) == 2
    assert "is not a dledger store" in one_error_line(capsys, command)


@pytest.mark.parametrize("begin", [5, 99, -1])
def test_read_file_says_when_begin_is_outside_the_log(begin, tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["read-file", node, "--begin", str(begin)]) == 2
    line = one_error_line(capsys, "read-file")
    assert f"--begin {begin} is outside the log (entries 0..4)" in line


def test_read_file_begin_inside_the_log_prints_from_there(tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["read-file", node, "--begin", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith("4\t")


def test_read_file_of_an_empty_store_says_it_holds_nothing(tmp_path, capsys):
    node = tmp_path / "dledger-n0"
    (node / "data").mkdir(parents=True)
    (node / "index").mkdir()
    assert main(["read-file", str(node), "--begin", "0"]) == 2
    assert "outside the log (no entries)" in one_error_line(capsys, "read-file")


def test_audit_help_shows_an_example_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["audit", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: dledger audit")
    assert "dledger audit /data/dledger-n0" in out
    for code in ("0  sound", "1  replicas", "2  the audit could not run", "3  damaged",
                 "4  unknown"):
        assert code in out


def test_audit_options_go_before_or_after_the_paths():
    from dledger.spark.audit_cli import build_parser

    p = build_parser()
    for argv in (["--out", "o", "--committed", "7", "a", "b"],
                 ["a", "--out", "o", "b", "--committed", "7"],
                 ["a", "b", "--out", "o", "--committed", "7"]):
        args = p.parse_intermixed_args(argv)
        assert (args.paths, args.out, args.committed) == (["a", "b"], "o", 7)


def test_audit_of_a_bad_path_is_one_line_and_exit_2(tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["audit", "--out", str(tmp_path / "o"), node, str(tmp_path / "nope")]) == 2
    assert "nope is not a directory" in one_error_line(capsys, "audit")


def test_audit_of_one_replica_is_one_line_and_exit_2(tmp_path, capsys):
    node = make_store(tmp_path)
    assert main(["audit", node]) == 2
    assert "at least two" in one_error_line(capsys, "audit")


def test_audit_of_an_unreadable_store_is_one_line_and_exit_2(tmp_path, capsys):
    a = make_store(tmp_path / "a", n=200)     # several 4 KiB data segments
    b = make_store(tmp_path / "b", n=200)
    with open(f"{b}/data/{'0' * 20}", "ab") as fh:   # one segment grows: sizes differ
        fh.write(b"\0" * 10)
    assert main(["audit", a, b]) == 2
    assert "differ in size" in one_error_line(capsys, "audit")


def test_audit_without_the_spark_extra_says_how_to_install_it_from_the_checkout(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "dledger.spark.audit", None)     # as if pyspark were not installed
    assert main(["audit", make_store(tmp_path / "a"), make_store(tmp_path / "b")]) == 2
    line = one_error_line(capsys, "audit")
    checkout = pathlib.Path(__file__).resolve().parents[2]
    assert line.startswith("dledger audit: error: the audit needs the spark extra (")
    assert line.endswith(f": pip install -e '{checkout}[spark]' from a checkout of dledger "
                         "(make installs it in the checkout's .venv)"), line


def test_outside_a_checkout_the_install_hint_names_a_placeholder(tmp_path, monkeypatch):
    import dledger.spark

    monkeypatch.setattr(dledger.spark, "__file__", str(tmp_path / "site-packages" / "dledger" / "spark" / "__init__.py"))
    assert dledger.spark.install_hint().startswith("pip install -e '/path/to/dledger[spark]' from a checkout")
