"""Waiting on a real runtime: ``poll(cond)`` checks ``cond()`` every 10 ms until it returns a
true value (returned), and fails the test, naming ``what``, once ``timeout`` seconds have passed
(tests on the simulator wait in virtual time instead).

``followed_leader(servers)`` is the leader every one of ``servers`` follows, or None
(``wait_for_followed_leader`` waits for it): a leader the others have not all heard of yet
may still lose its term to a competing candidate (one that recovered just after the election,
say)."""

import time


def poll(cond, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, f"{what} not met in time"
        time.sleep(0.01)
    return value


def followed_leader(servers):
    """The server among ``servers`` that leads while every one of them follows it; else None."""
    lead = next((s for s in servers if s.is_leader), None)
    if lead is None or any(s.leader_id != lead.config.self_id for s in servers):
        return None
    return lead


def wait_for_followed_leader(servers, timeout: float = 20.0):
    """``followed_leader(servers)`` once there is one; fails the test after ``timeout`` seconds."""
    return poll(lambda: followed_leader(servers), timeout,
                what=f"a leader every one of {len(servers)} servers follows")
