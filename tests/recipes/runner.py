"""Running a marked block as a reader would: in a directory of its own where the repository's
files are reachable (symlinks), with the project's virtualenv first on PATH.

A session block (``$ `` lines) runs in one bash process, command by command; each command's
output (stdout and stderr, as a terminal shows them) is compared with the lines the doc shows
under it. Output that comes later, such as the log of a process started with ``&`` or the
last lines of one just sent SIGTERM, is awaited until the lines match or the block's time is
up. Any other block runs whole: a shell block as ``bash -e``, a Python block as a script.
"""

from __future__ import annotations

import os
import pathlib
import pty
import queue
import re
import signal
import subprocess
import sys
import termios
import threading
import time

from dledger.transport.loopback import free_ports

from recipes.blocks import ROOT, Block, matches, mismatch, session_steps

SENTINEL = "__doc_step_done__"
QUIET = 10.0        # seconds without a new line after a command ended: its output is complete


def workdir(path: pathlib.Path) -> pathlib.Path:
    """``path`` with the repository's top-level files and folders linked in, and ``.venv``."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv", "run-output") and not (path / entry.name).exists():
            (path / entry.name).symlink_to(entry)
    if not (path / ".venv").exists():
        (path / ".venv").symlink_to(pathlib.Path(sys.prefix))
    return path


def environment(path: pathlib.Path, variables: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DLEDGER_SECRET", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS", "COLUMNS")}
    env.update(PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1", SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PWD=str(path))
    env.update(variables)
    return env


class Substitution:
    """The block's ``sub`` and ``ports`` options: applied to its text before it runs, and the
    ports mapped back in what it prints, so that the doc's own figures are compared."""

    def __init__(self, blocks: list[Block], variables: dict[str, str], tmp: pathlib.Path) -> None:
        self.variables, self.tmp = {**variables, "PWD": str(tmp)}, tmp
        doc_ports = sorted({p for b in blocks for p in b.marker.ports})
        self.ports = dict(zip(doc_ports, free_ports(len(doc_ports)))) if doc_ports else {}

    def expand(self, text: str) -> str:
        return re.sub(r"\$(\w+)", lambda m: self.variables.get(m.group(1), m.group(0)), text)

    def apply(self, block: Block, text: str | None = None) -> str:
        """The block's text (or ``text``, a part of it) as it runs."""
        if text is None:
            text = block.text
            for old, _ in block.marker.subs:
                assert old in text, f"{block.where}: the block no longer holds {old!r} (its sub option)"
        for old, new in block.marker.subs:
            text = text.replace(old, self.expand(new))
        for doc_port, port in self.ports.items():
            text = re.sub(rf"(?<!\d){doc_port}(?!\d)", str(port), text)
        return text

    def back(self, line: str) -> str:
        for doc_port, port in self.ports.items():
            line = re.sub(rf"(?<!\d){port}(?!\d)", str(doc_port), line)
        return line.replace(f"{self.tmp}/", "").replace(str(self.tmp), ".")


class Shell:
    """One bash process, fed a command at a time. Its output goes to a terminal (a pty), as a
    reader's does, so commands that print a table on a terminal print it here; a thread reads
    it line by line."""

    def __init__(self, cwd: pathlib.Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR                  # "\n" stays "\n"
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=slave, stderr=slave,
                                     text=True, bufsize=1, start_new_session=True)
        os.close(slave)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:                         # EIO: every writer has closed the terminal
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                self.lines.put(line.decode(errors="replace").rstrip("\r"))
        if pending:
            self.lines.put(pending.decode(errors="replace"))
        self.lines.put(None)

    def step(self, command: str, expected: list[str], deadline: float, back) -> list[str]:
        """Run ``command``; return its lines once it ended and they match ``expected``, or
        when nothing more came for ``QUIET`` seconds after it ended, or at the deadline."""
        self.proc.stdin.write(f"{command}\necho {SENTINEL} $?\n")
        self.proc.stdin.flush()
        got: list[str] = []
        ended = False
        last = time.monotonic()
        while True:
            if ended and matches(expected, got):
                return got
            now = time.monotonic()
            if now >= deadline:
                return got + ([] if ended else ["(still running when the block's time was up)"])
            if ended and now - last >= QUIET:
                return got                          # nothing more came: the lines do not match
            try:
                line = self.lines.get(timeout=min(deadline - now, 0.05 if ended else deadline - now))
            except queue.Empty:
                if ended and not expected:
                    return got
                continue
            last = time.monotonic()
            if line is None:
                return got + ["(the shell exited)"]
            if line.startswith(f"{SENTINEL} "):
                ended = True
            else:
                got.append(back(line))

    def close(self) -> None:
        stop_group(self.proc)
        self.reader.join(10)                        # the terminal's last writer is gone
        os.close(self.master)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group the block started (its background jobs with it), then
    SIGKILL to what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.wait(10)


def run_session(blocks: list[Block], subst: Substitution, cwd: pathlib.Path, env: dict) -> None:
    shell = Shell(cwd, env)
    try:
        for block in blocks:
            deadline = time.monotonic() + block.marker.timeout
            subst.apply(block)                      # every sub still applies
            for command, expected in session_steps(block.text):
                got = shell.step(subst.apply(block, command), expected, deadline, subst.back)
                assert matches(expected, got), mismatch(f"{block.where}: $ {command}", expected, got)
    finally:
        shell.close()


def run_whole(block: Block, text: str, subst: Substitution, cwd: pathlib.Path, env: dict,
              prelude: str = "") -> list[str]:
    """A shell block as ``bash -e``, a Python block as a script (``pytest``: as a test file);
    exit status 0 is required. Returns what it printed (stdout and stderr)."""
    if block.lang == "python":
        name = "test_doc_block.py" if block.marker.pytest else "doc_block.py"
        (cwd / name).write_text(prelude + text)
        argv = ([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(cwd), name]
                if block.marker.pytest else [sys.executable, name])
    else:
        (cwd / "doc_block.sh").write_text(text)
        argv = ["bash", "-e", "-o", "pipefail", "doc_block.sh"]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=block.marker.timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise AssertionError(f"{block.where}: still running after {block.marker.timeout:.0f} s") from None
    finally:
        stop_group(proc)
    lines = [subst.back(line) for line in out.splitlines()]
    assert proc.returncode == 0, f"{block.where}: exit status {proc.returncode}\n" + "\n".join(lines[-40:])
    return lines
