"""Errors that used to mislead, each now one line on stderr that names its cause: a wrong
``--group`` and a TLS cluster reached without TLS (the node says why it refuses the
connection), a body over the entry limit (its size and the limit), a store directory the system
refuses (its path, not the listening address), a secret file that cannot be read, argparse's
own errors (no usage block), and a misspelt ``[[groups]]`` table in the TOML file."""

import io
import shutil
import sys

import pytest

from dledger.cli import main
from dledger.cli.node import start_server
from dledger.client.aio import MAX_BODY

from transport.tcp_helpers import TcpGroup, free_ports
from transport.test_tcp_tls import make_ca, make_cert


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "usage:" not in err, err
    assert err.startswith(f"dledger {command}: error: "), err
    return err[:-1]


@pytest.fixture
def group(tmp_path):
    g = TcpGroup(tmp_path, store_type="memory").start_all()
    yield g
    g.stop_all()


def test_a_wrong_group_is_refused_by_the_node_which_says_so(group, capsys):
    group.leader()
    assert main(["append", "--peers", group.peers, "--group", "wrong", "--timeout", "0.5", "x"]) == 1
    line = one_error_line(capsys, "append")
    assert "refused the connection: no node 'n" in line and "of group 'wrong' here" in line, line
    assert "closed the connection" not in line


def test_a_body_over_the_entry_limit_names_its_size_and_the_limit(group, capsys, monkeypatch):
    group.leader()
    client = ["--peers", group.peers, "--group", "t", "--timeout", "5"]
    # the group's 4 MiB data segments hold a body of at most 4 MiB less 56 bytes
    limit = 4 * 1024 * 1024 - 56
    body = b"b" * (limit + 1)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body + b"\n")))
    assert main(["append", *client]) == 1
    line = one_error_line(capsys, "append")
    assert line.endswith(f"refused the append: UNEXPECTED_ARGUMENT: a body of {len(body):,} bytes is over its "
                         f"entry size limit, {limit:,} bytes (a node takes a body of at most its data segment "
                         "size less 56 bytes)"), line
    # larger than any node stores: refused before anything is sent, as a bad argument
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"c" * (MAX_BODY + 1) + b"\n")))
    assert main(["append", *client]) == 2
    line = one_error_line(capsys, "append")
    assert line.endswith(f"a body of {MAX_BODY + 1:,} bytes is over the largest entry a node stores "
                         f"({MAX_BODY:,} bytes); nothing was sent"), line
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"fits\n")))
    assert main(["append", *client]) == 0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test's certificates")
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "cluster-ca")
    return {"ca": str(ca[0]), "node": make_cert(d, "node", ca)}


def test_a_tls_cluster_reached_without_tls_and_the_other_way_round_say_so(tmp_path, pki, capsys):
    cert, key = pki["node"]
    tls = TcpGroup(tmp_path / "tls", store_type="memory", tls_cert_file=cert, tls_key_file=key,
                   tls_ca_file=pki["ca"]).start_all()
    plain = TcpGroup(tmp_path / "plain", group="p", store_type="memory", runtime=tls.runtime).start_all()
    try:
        tls.leader()
        plain.leader()
        assert main(["status", "--peers", tls.peers, "--group", "t", "--timeout", "0.5"]) == 1
        out = capsys.readouterr().out
        assert out.count("refused the connection: this node accepts TLS connections only: connect over TLS "
                         "with a certificate its cluster's CA signed") == 3, out
        assert main(["append", "--peers", tls.peers, "--group", "t", "--timeout", "0.5", "x"]) == 1
        assert "accepts TLS connections only" in one_error_line(capsys, "append")
        flags = ["--tls-cert", cert, "--tls-key", key, "--tls-ca", pki["ca"]]
        assert main(["append", "--peers", tls.peers, "--group", "t", "--timeout", "5", *flags, "x"]) == 0
        capsys.readouterr()
        assert main(["append", "--peers", plain.peers, "--group", "p", "--timeout", "0.5", *flags, "x"]) == 1
        line = one_error_line(capsys, "append")
        assert "does not use TLS: connect without a client certificate" in line, line
    finally:
        plain.stop_all(close_runtime=False)
        tls.stop_all()


def test_a_store_directory_the_system_refuses_is_named_not_the_address(tmp_path, capsys):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    port = free_ports(1)[0]
    assert main(["node", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}",
                 "--store-dir", str(not_a_dir), "--log-level", "ERROR"]) == 1
    line = one_error_line(capsys, "node")
    assert line.endswith(f"node n0 of group g cannot use its store directory {not_a_dir}/dledger-n0: "
                         f"Not a directory"), line
    assert f"127.0.0.1:{port}" not in line


def test_permission_denied_on_the_store_names_the_path_the_system_refused():
    from dledger.config import DLedgerConfig

    class Refused:
        config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:20911",
                               store_base_dir="/srv/data").validate()

        def __init__(self, exc):
            self.exc = exc

        def startup(self):
            raise self.exc

    with pytest.raises(RuntimeError) as denied:
        start_server(Refused(PermissionError(13, "Permission denied", "/srv/data")))
    assert str(denied.value) == ("node n0 of group g cannot use its store directory /srv/data/dledger-n0: "
                                 "Permission denied (/srv/data)")
    with pytest.raises(RuntimeError) as taken:
        start_server(Refused(OSError(98, "Address already in use")))
    assert str(taken.value) == "node n0 of group g cannot start on 127.0.0.1:20911: Address already in use"


@pytest.mark.parametrize("command", [["node", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1"],
                                     ["status", "--peers", "n0-127.0.0.1:1", "--group", "g"]])
def test_a_secret_file_that_cannot_be_read_is_a_bad_flag_naming_it(tmp_path, command, capsys):
    missing = tmp_path / "no-secret"
    assert main([*command, "--secret-file", str(missing)]) == 2
    line = one_error_line(capsys, command[0])
    assert line.endswith(f"cannot read the secret file {missing}: No such file or directory"), line
    assert not (tmp_path / "dledger-n0").exists()


@pytest.mark.parametrize("argv, message", [
    (["status", "--peers", "n0-127.0.0.1:1"], "dledger status: error: the following arguments are required: --group"),
    (["get", "--peers", "n0-127.0.0.1:1", "--group", "g", "x"],
     "dledger get: error: argument index: invalid int value: 'x'"),
    (["append", "--peers", "n0-127.0.0.1:1", "--group", "g", "--bogus"],
     "dledger append: error: unrecognized arguments: --bogus"),
    (["nosuch"], "dledger: error: argument command: invalid choice: 'nosuch'"),
])
def test_argparse_errors_are_one_line_pointing_at_help(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "usage:" not in err, err
    prog = message.split(": error:")[0]
    assert err.startswith(message) and err.endswith(f"({prog} --help shows the usage)\n"), err


@pytest.mark.parametrize("toml, message", [
    ('id = "n0"\n[[group]]\ngroup = "g"\npeers = "n0-127.0.0.1:1"\n',
     "[[group]] is not a table this file has (did you mean [[groups]]?); each group is a [[groups]] table"),
    ('id = "n0"\n[groups]\ngroup = "g"\npeers = "n0-127.0.0.1:1"\n',
     "groups must be a non-empty array of tables ([[groups]])"),
    ('id = "n0"\npeer = "n0-127.0.0.1:1"\ngroup = "g"\n', "unknown key 'peer' (did you mean 'peers'?)"),
    ('id = "n0"\npeers = "n0-127.0.0.1:1"\n[[groups]]\ngroup = "g"\n[groups.tls]\ncert = "x"\n',
     "[[groups]] #1: 'tls' is a table; a group's settings are plain keys"),
])
def test_a_misspelt_table_or_key_in_the_file_is_named(tmp_path, toml, message, capsys):
    path = tmp_path / "node.toml"
    path.write_text(toml)
    assert main(["node", "--config", str(path)]) == 2
    line = one_error_line(capsys, "node")
    assert line.endswith(message), line
