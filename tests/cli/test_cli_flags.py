"""``dledger`` subcommands: ``--help`` with an example everywhere, and bad flags, bad configs and
unreachable peers as one line on stderr with a non-zero exit code, never a traceback."""

import pytest

from dledger.cli import main

from transport.tcp_helpers import free_ports

COMMANDS = ["node", "append", "get", "status", "transfer-leader"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "example:" in out and f"dledger {command}" in out


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["node", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1,n1-127.0.0.1:2"], "','"),
    (["node", "--group", "g", "--id", "n9", "--peers", "n0-127.0.0.1:20911"], "n9"),
    (["node", "--id", "n0", "--peers", "n0-127.0.0.1:20911"], "group is missing"),
    (["append", "--peers", "n0-127.0.0.1", "--group", "g", "x"], "port"),
    (["append", "--peers", "n0-127.0.0.1:1", "--group", "g", "--timeout", "0", "x"], "timeout"),
    (["get", "--peers", "n0-127.0.0.1:1", "--group", "g", "--secret-file", "/nonexistent/secret", "0"],
     "/nonexistent/secret"),
    (["status", "--peers", "n0-127.0.0.1:1", "--group", "g", "--tls-cert", "c.pem"], "--tls-key"),
    (["get", "--peers", "n0-127.0.0.1:1", "--group", "g", "--node", "n9", "0"], "'n9' is not in peers"),
])
def test_bad_flags_are_one_line_and_exit_2_or_1(argv, words, capsys):
    code = main(argv)
    assert code in (1, 2)
    assert words in one_error_line(capsys)


def test_an_argparse_error_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["get", "--peers", "n0-127.0.0.1:1", "--group", "g", "not-a-number"])
    assert exc.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_get_takes_a_read_mode_by_short_or_full_name_and_refuses_others(capsys):
    from dledger.cli import build_parser
    from dledger.protocol import ReadMode
    base = ["get", "--peers", "n0-127.0.0.1:1", "--group", "g", "0"]
    assert build_parser().parse_args(base).read_mode is ReadMode.READ_INDEX_READ
    for text, mode in [("unsafe", ReadMode.UNSAFE_READ), ("raft-log", ReadMode.RAFT_LOG_READ),
                       ("LEASE_READ", ReadMode.LEASE_READ), ("read_index", ReadMode.READ_INDEX_READ)]:
        assert build_parser().parse_args(base + ["--read-mode", text]).read_mode is mode
    with pytest.raises(SystemExit) as exc:
        main(base + ["--read-mode", "fast"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "unknown read mode 'fast'" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["append", "x"], ["get", "0"], ["transfer-leader", "--to", "n1"]])
def test_unreachable_peers_are_one_line_and_exit_1(command, capsys):
    ports = free_ports(2)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    code = main([command[0], "--peers", peers, "--group", "g", "--timeout", "0.3", *command[1:]])
    assert code == 1
    assert "within 0.3 s" in one_error_line(capsys)


def test_status_of_an_unreachable_group_exits_1_with_every_node_marked(capsys):
    ports = free_ports(2)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    assert main(["status", "--peers", peers, "--group", "g", "--timeout", "0.3", "--json"]) == 1
    assert capsys.readouterr().out.count('"error"') == 2


def test_a_toml_config_with_an_unknown_key_or_bad_toml_is_refused(tmp_path, capsys):
    bad = tmp_path / "node.toml"
    bad.write_text('store_dir = "/tmp/x"\n[[groups]]\ngroup = "g"\nid = "n0"\npeers = "n0-127.0.0.1:1"\n'
                   'heartbeat = 5\n')
    assert main(["node", "--config", str(bad)]) == 2
    assert "unknown key 'heartbeat'" in one_error_line(capsys)
    bad.write_text("group = \n")
    assert main(["node", "--config", str(bad)]) == 2
    assert "not valid TOML" in one_error_line(capsys)
    assert main(["node", "--config", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read" in one_error_line(capsys)


def test_a_toml_config_gives_several_groups_with_shared_defaults(tmp_path):
    from argparse import Namespace

    from dledger.cli.node import load_configs

    path = tmp_path / "node.toml"
    path.write_text('store_dir = "/data"\nid = "n0"\ndurability = "fsync"\n'
                    '[[groups]]\ngroup = "a"\npeers = "n0-127.0.0.1:1;n1-127.0.0.1:2"\n'
                    '[[groups]]\ngroup = "b"\npeers = "n0-127.0.0.1:1;n1-127.0.0.1:3"\ndurability = "page_cache"\n')
    args = Namespace(config=str(path), group=None, id=None, peers=None, store_dir=None, durability=None,
                     secret_file=None)
    a, b = load_configs(args)
    # the two groups would share /data/dledger-n0: each gets a directory of its own
    assert (a.group, a.self_id, a.store_base_dir, a.durability) == ("a", "n0", "/data/a", "fsync")
    assert (b.group, b.durability, b.peer_map["n1"]) == ("b", "page_cache", "127.0.0.1:3")
    args.store_dir = "/flag"
    assert {c.store_base_dir for c in load_configs(args)} == {"/flag/a", "/flag/b"}


def test_a_node_whose_port_is_taken_is_one_line_naming_the_address_and_exits_1(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["node", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}",
                     "--store-dir", str(tmp_path), "--log-level", "ERROR"])
    assert code == 1
    assert f"cannot start on 127.0.0.1:{port}" in one_error_line(capsys)


def test_bootstrap_is_set_only_by_its_flag():
    """``--bootstrap`` (a brand-new cluster: a new store may vote with a member missing) is off
    unless given: a node whose disk was replaced must relearn before it votes."""
    import argparse

    from dledger.cli import node as cli_node
    p = argparse.ArgumentParser()
    cli_node.add_parser(p.add_subparsers(dest="cmd"))
    base = ["node", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3",
            "--store-dir", "store"]
    assert [c.bootstrap for c in cli_node.load_configs(p.parse_args(base))] == [False]
    assert [c.bootstrap for c in cli_node.load_configs(p.parse_args(base + ["--bootstrap"]))] == [True]
