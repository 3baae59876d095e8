"""Real RocketMQ clients written by others, each in its own cached virtualenv.

The two Python clients the broker is tested with both install a top-level module named
``rocketmq``, so they cannot share one environment: each gets a virtualenv of its own under
``.client-venvs/`` at the project root (ignored by git), made on first use and kept, and the
tests drive it as a subprocess. The clients write logs under ``$HOME/logs``: ``client_env``
points HOME at a directory of the test's.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / ".client-venvs"

#: client kind -> (the pip requirement, the virtualenv's directory name)
CLIENTS = {
    "remoting": ("rocketmq==0.4.4", "rocketmq-0.4.4"),
    "grpc": ("rocketmq-python-client==5.1.2", "rocketmq-python-client-5.1.2"),
}


def client_python(kind: str) -> str:
    """The interpreter of the virtualenv holding client ``kind`` (made and installed on first
    use; a lock keeps two test processes from installing at once)."""
    requirement, name = CLIENTS[kind]
    where = ROOT / name
    python = where / "bin" / "python"
    stamp = where / ".installed"
    ROOT.mkdir(exist_ok=True)
    with open(ROOT / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == requirement and python.exists()):
            venv.EnvBuilder(with_pip=True, clear=True).create(where)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            requirement], check=True)
            stamp.write_text(requirement)
    return str(python)


def client_env(home: str | os.PathLike) -> dict[str, str]:
    """The environment for a client subprocess: HOME at ``home`` (the clients log there)."""
    env = dict(os.environ)
    env["HOME"] = str(home)
    env.pop("PYTHONPATH", None)
    return env


if __name__ == "__main__":          # make both ahead of a test run: python tests/helpers/client_venvs.py
    for kind in (sys.argv[1:] or list(CLIENTS)):
        print(kind, client_python(kind))
