"""The README's two Python blocks run as the README says: the node block as three processes
(n0, n1, n2 on loopback), whose leader appends and prints the entry back while every node keeps
serving, then the client block against them; SIGINT and SIGTERM stop the nodes with exit 0
and no traceback. The blocks are read from README.md as written; only the machine-specific
values are replaced (addresses, ``self_id``, the store directory), plus small segments and the
election timing of a loaded test machine (docs/operations.md), each replacement checked to
apply exactly once. ``dledger --version`` is what the README shows."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import tomllib

from dledger import __version__
from dledger.cli import main

from transport.tcp_helpers import free_ports

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 60
README_PEERS = "n0-10.0.0.1:20911;n1-10.0.0.2:20911;n2-10.0.0.3:20911"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def replaced(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the README block no longer holds {old!r} once"
    return text.replace(old, new)


def node_script(block: str, node_id: str, peers: str, store: pathlib.Path) -> str:
    block = replaced(block, README_PEERS, peers)
    block = replaced(block, 'self_id="n0"', f'self_id="{node_id}"')
    block = replaced(block, 'store_base_dir="/var/lib/app"', f'store_base_dir="{store}"')
    return replaced(block, 'durability="fsync")',
                    'durability="fsync", mapped_file_size_for_entry_data=1 << 22, '
                    'mapped_file_size_for_entry_index=1 << 21, heart_beat_time_interval_ms=500)')


def wait_for(predicate, what: str):
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_readme_node_block_as_three_processes_appends_once_and_serves_until_stopped(tmp_path):
    node_block, client_block = python_blocks()[:2]
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    env = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
    env.update(PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")
    outs = {f"n{k}": tmp_path / f"n{k}.out" for k in range(3)}
    procs = {}
    try:
        for node_id, out in outs.items():
            with open(out, "wb") as f:
                procs[node_id] = subprocess.Popen(
                    [sys.executable, "-c", node_script(node_block, node_id, peers, tmp_path / "stores")],
                    env=env, stdout=f, stderr=subprocess.STDOUT)
        printed = lambda: {n: o.read_text() for n, o in outs.items()}       # noqa: E731
        wait_for(lambda: any(word in text for text in printed().values()
                             for word in ("b'order #1'", "not appended", "Traceback"))
                 or any(p.poll() is not None for p in procs.values()), "the leader's append")
        texts = printed()
        leaders = [n for n, text in texts.items() if "b'order #1'" in text]
        assert len(leaders) == 1, texts
        assert "now LEADER in term" in texts[leaders[0]], texts
        assert all("Traceback" not in t and "not appended" not in t for t in texts.values()), texts
        assert all(p.poll() is None for p in procs.values()), texts           # every node keeps serving
        r = subprocess.run([sys.executable, "-c", replaced(client_block, README_PEERS, peers)], env=env,
                           capture_output=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        index, body = r.stdout.decode().split(maxsplit=1)
        assert int(index) >= 1 and body == "b'order #1'\n", r.stdout
        procs["n0"].send_signal(signal.SIGTERM)
        for node_id in ("n1", "n2"):
            procs[node_id].send_signal(signal.SIGINT)
        assert [p.wait(TIMEOUT) for p in procs.values()] == [0, 0, 0], printed()
        assert all("Traceback" not in t for t in printed().values())
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(TIMEOUT)


def test_version_prints_the_package_version_which_is_the_one_pyproject_declares(capsys):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == declared
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert re.fullmatch(rf"dledger {re.escape(declared)} \(Python \d+\.\d+\.\d+\S*\)\n", out), out
    assert f"$ dledger --version\ndledger {declared} (Python " in (ROOT / "README.md").read_text()
