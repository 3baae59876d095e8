"""``dledger audit`` as a person runs it: the Spark audit (``dledger.spark.audit_cli``), with
Ctrl-C ending it in one line.

A Ctrl-C reaches PySpark's own SIGINT handler, which asks the JVM to cancel its jobs in the
middle of whatever call the main thread was making: py4j then logs that call's failure on the
root logger with a traceback, which is dropped here (the command says "interrupted" itself).
A Ctrl-C while PySpark is still starting its JVM leaves that JVM running with no driver (it
never learns that the driver is gone), so on Ctrl-C the processes this one started are ended:
SIGTERM, then SIGKILL after five seconds.
"""

from __future__ import annotations

import logging
import os
import signal
import time


class _Py4JSendErrors(logging.Filter):
    """py4j logs, on the root logger and with a traceback, a command to the JVM cut short: by
    Ctrl-C (PySpark's SIGINT handler then asks the JVM to cancel its jobs in the middle of the
    call) or by the JVM's end. The audit says either in one line itself."""

    MESSAGES = ("Exception while sending command.", "KeyboardInterrupt while sending command.")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.MESSAGES


def _children() -> list[int]:
    """The processes this one started that still run (Linux: read from ``/proc``)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()    # after "pid (comm) ": state, ppid, ...
            if len(fields) > 1 and int(fields[1]) == me and fields[0] != b"Z":
                found.append(int(name))
    return found


def _end_children(timeout: float = 5.0) -> None:
    """SIGTERM the processes this one started (the audit's Spark JVM, which outlives a Ctrl-C
    that came while it was starting), then SIGKILL what is left after ``timeout``."""
    children = _children()
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    while children and time.monotonic() < deadline:
        for pid in list(children):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    children.remove(pid)
            except ChildProcessError:
                children.remove(pid)
        time.sleep(0.05)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def run(argv: list[str]) -> int:
    """``dledger audit ARGV``; Ctrl-C ends the audit's Spark JVM too and raises ``KeyboardInterrupt``
    (the command prints the one line)."""
    from dledger.spark.audit_cli import main as audit_main   # no pyspark import until it runs

    quiet = _Py4JSendErrors()
    logging.getLogger().addFilter(quiet)
    try:
        return audit_main(argv)
    except KeyboardInterrupt:
        _end_children()
        raise
    finally:
        logging.getLogger().removeFilter(quiet)


__all__ = ["run"]
