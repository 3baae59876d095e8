"""Several groups in one ``dledger node`` process: the multi-group TOML file of
docs/operations.md, read from the doc as written, gives each group its own store directory and
starts as three node processes that both groups elect in; a store already at the shared path
is never guessed an owner; a single group keeps the path it always had; real conflicts are
refused in one line naming both groups."""

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from dledger import DLedgerClient
from dledger.cli import node as cli_node
from dledger.cli.node import NodeConfigError
from dledger.errors import DLedgerError

from transport.tcp_helpers import free_ports

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 60
DOC_PEERS = "n0-10.0.0.1:20911;n1-10.0.0.2:20911;n2-10.0.0.3:20911"
SECRET = "a-multi-group-secret-0123456789"


def documented_toml() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if "[[groups]]" in b and 'group = "audit"' in b]
    return block


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_node.add_parser(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(["node", *argv])


def load(tmp_path: pathlib.Path, toml: str, *flags: str):
    path = tmp_path / "node.toml"
    path.write_text(toml)
    return cli_node.load_configs(parse(["--config", str(path), *flags]))


def test_the_documented_file_as_written_gives_each_group_its_own_store_directory(tmp_path):
    orders, audit = load(tmp_path, documented_toml())
    assert (orders.group, orders.durability, orders.default_path) == \
        ("orders", "fsync", "/var/lib/dledger/orders/dledger-n0")
    assert (audit.group, audit.durability, audit.default_path) == \
        ("audit", "page_cache", "/var/lib/dledger/audit/dledger-n0")
    assert orders.peer_map == audit.peer_map == {"n0": "10.0.0.1:20911", "n1": "10.0.0.2:20911",
                                                  "n2": "10.0.0.3:20911"}


def test_the_documented_file_starts_as_three_processes_and_both_groups_elect(tmp_path):
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    stores = tmp_path / "stores"
    doc = documented_toml()
    for old, new in ((DOC_PEERS, peers), ('"/var/lib/dledger"', f'"{stores}"'),
                     ('"/etc/dledger/secret"', f'"{secret}"')):
        assert old in doc
        doc = doc.replace(old, new)
    env = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    procs = {}
    try:
        for k in range(3):
            conf = tmp_path / f"n{k}.toml"
            conf.write_text(doc.replace('id = "n0"', f'id = "n{k}"', 1))
            # the file as documented; small segments from the command line (a test's disk)
            procs[f"n{k}"] = subprocess.Popen(
                [sys.executable, "-m", "dledger.cli", "node", "--config", str(conf), "--store-segment-size", "4MiB",
                 "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for group in ("orders", "audit"):
            with DLedgerClient(peers, group, secret_file=str(secret), timeout_s=30) as client:
                index = appended(client, group.encode())
                assert client.get(index).body == group.encode()
        for k in range(3):
            for group in ("orders", "audit"):
                assert (stores / group / f"dledger-n{k}").is_dir()
        assert not (stores / "dledger-n0").exists()
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for name, p in procs.items():
            assert p.wait(TIMEOUT) == 0, (name, p.stderr.read().decode()[-2000:])
            err = p.stderr.read().decode()
            assert "serving 2 group(s)" in err and "Traceback" not in err and "locked" not in err, err
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(TIMEOUT)


def appended(client, body: bytes) -> int:
    """Append ``body`` once, as an operator would: an outcome left unknown by a change of
    leader is looked up in the log before the append is tried again."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return client.append(body).index
        except DLedgerError:
            assert time.monotonic() < deadline, "no append taken in time"
            meta = client.metadata()
            for i in range(meta["committed_index"] + 1):
                if client.get(i).body == body:
                    return i


TWO_GROUPS = ('id = "n0"\nstore_dir = "{base}"\n'
              '[[groups]]\ngroup = "orders"\npeers = "n0-127.0.0.1:1"\n{orders}'
              '[[groups]]\ngroup = "audit"\npeers = "n0-127.0.0.1:1"\n{audit}')


def test_a_store_at_the_shared_path_is_never_given_to_a_guessed_group(tmp_path):
    base = tmp_path / "data"
    (base / "dledger-n0").mkdir(parents=True)               # written when the process ran one group
    with pytest.raises(NodeConfigError) as refused:
        load(tmp_path, TWO_GROUPS.format(base=base, orders="", audit=""))
    assert str(refused.value) == (
        f"{tmp_path / 'node.toml'}: {base}/dledger-n0 holds a store, and groups 'orders' and 'audit' would all "
        f"use it: give the group it belongs to store_dir = \"{base}\" in its [[groups]] table (the others "
        f"then get {base}/<group>/dledger-n0)")
    orders, audit = load(tmp_path, TWO_GROUPS.format(base=base, orders=f'store_dir = "{base}"\n', audit=""))
    assert orders.default_path == f"{base}/dledger-n0" and audit.default_path == f"{base}/audit/dledger-n0"


def test_a_single_group_and_groups_of_different_ids_keep_the_path_they_always_had(tmp_path):
    base = tmp_path / "data"
    (base / "dledger-n0").mkdir(parents=True)
    (c,) = load(tmp_path, f'id = "n0"\nstore_dir = "{base}"\n[[groups]]\ngroup = "orders"\n'
                          f'peers = "n0-127.0.0.1:1"\n')
    assert c.default_path == f"{base}/dledger-n0"
    (c,) = cli_node.load_configs(parse(["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1",
                                        "--store-dir", str(base)]))
    assert c.default_path == f"{base}/dledger-n0"
    a, b = load(tmp_path, TWO_GROUPS.format(base=base, orders="", audit="").replace(
        'group = "audit"\npeers = "n0-127.0.0.1:1"\n', 'group = "audit"\nid = "n1"\npeers = "n1-127.0.0.1:2"\n'))
    assert (a.default_path, b.default_path) == (f"{base}/dledger-n0", f"{base}/dledger-n1")


def test_two_groups_left_with_one_store_directory_are_refused_naming_both(tmp_path):
    base = tmp_path / "data"
    with pytest.raises(NodeConfigError) as refused:
        load(tmp_path, TWO_GROUPS.format(base=base, orders=f'store_dir = "{base}"\n', audit=f'store_dir = "{base}"\n'))
    assert str(refused.value) == (f"{tmp_path / 'node.toml'}: groups 'orders' and 'audit' set the same store "
                                  f"directory {base}/dledger-n0 in their [[groups]] tables: give each a store_dir "
                                  f"of its own")
    # 'orders' moves to <base>/orders, where a third group says its own store is
    third = f'[[groups]]\ngroup = "billing"\npeers = "n0-127.0.0.1:1"\nstore_dir = "{base}/orders"\n'
    with pytest.raises(NodeConfigError) as refused:
        load(tmp_path, TWO_GROUPS.format(base=base, orders="", audit="") + third)
    assert str(refused.value) == (f"{tmp_path / 'node.toml'}: groups 'orders' and 'billing' would share the store "
                                  f"directory {base}/orders/dledger-n0: give each a store_dir of its own")


def test_a_group_whose_name_cannot_be_a_directory_must_be_given_one(tmp_path):
    base = tmp_path / "data"
    toml = TWO_GROUPS.format(base=base, orders="", audit="").replace('group = "audit"', 'group = "a/../b"')
    with pytest.raises(NodeConfigError, match=r"the name 'a/\.\./b' cannot name a directory of its own"):
        load(tmp_path, toml)


def test_a_conflict_from_the_command_line_is_one_line_and_exit_2(tmp_path, capsys):
    from dledger.cli import main

    base = tmp_path / "data"
    path = tmp_path / "node.toml"
    path.write_text(TWO_GROUPS.format(base=base, orders=f'store_dir = "{base}"\n', audit=f'store_dir = "{base}"\n'))
    assert main(["node", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "groups 'orders' and 'audit' set the same store directory" in err, err
