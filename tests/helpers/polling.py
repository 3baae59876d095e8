"""Waiting on a real runtime: ``poll(cond)`` checks ``cond()`` every 10 ms until it holds, and
fails the test, naming ``what``, once ``timeout`` seconds have passed (tests on the simulator
wait in virtual time instead)."""

import time


def poll(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} not met in time"
        time.sleep(0.01)
