"""``examples/three_nodes.py``, the README's three real nodes, runs as documented: three node
processes, appends through the client, the leader's process killed, an append through the new
leader, everything read back, exit 0."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_three_node_example_survives_the_loss_of_its_leader(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "three_nodes.py"), "--dir", str(tmp_path)],
                       capture_output=True, env=env, timeout=120)
    out = r.stdout.decode()
    assert r.returncode == 0, (out, r.stderr.decode()[-2000:])
    assert "appended 3 entries through" in out and "killed; order #3 at index " in out
    assert "read back: ['order #0', 'order #1', 'order #2', 'order #3']" in out
    assert sorted(os.listdir(tmp_path)) == ["dledger-n0", "dledger-n1", "dledger-n2"]
