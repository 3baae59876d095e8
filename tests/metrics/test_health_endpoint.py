"""``/health`` and ``/ready`` beside ``/metrics``, over real HTTP on 127.0.0.1: 200 once a
group elected, 503 with a one-line reason before and for halted, recovering, leaderless or
lagging nodes, 404 for any other path; and the readiness rule itself on a simulated cluster
whose follower falls behind and catches up (virtual time)."""

import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from dledger.core import Role
from dledger.metrics import NodeMetrics, serve
from dledger.metrics import health
from dledger.sim import Cluster

from metrics.helpers import WAIT, InprocCluster, scrape


def get(url: str, method: str = "GET") -> tuple[int, str]:
    """``(status, body)`` of one request (an error status is an answer too)."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get_until(url: str, predicate, timeout: float = WAIT) -> tuple[int, str]:
    """Ask ``url`` until ``predicate(status, body)`` holds; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = get(url)
        if predicate(*answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.02)


def one_line(body: str) -> str:
    assert body.endswith("\n") and body.count("\n") == 1, body
    return body[:-1]


def test_ready_is_503_until_the_group_elects_then_200_on_every_node_and_other_paths_are_404():
    c = InprocCluster()
    with serve(0, c.servers.values(), host="127.0.0.1") as endpoint:
        base = endpoint.base_url
        status, body = get(f"{base}/ready")
        assert status == 503 and one_line(body).endswith("is not running")
        assert get(f"{base}/health") == (200, "live\n")              # the process serves
        c.start()
        try:
            lead = c.leader()
            assert lead.append(b"x").result(WAIT).code == 200
            # followers learn the leader from its heartbeats, and fresh stores clear once
            # every member answered: poll, within a deadline
            status, body = get_until(f"{base}/ready", lambda status, body: status == 200)
            assert status == 200, body
            line = one_line(body)
            assert line.startswith("ready: ") and line.count("in term") == 3
            assert f"g/{lead.config.self_id} LEADER in term" in line
            assert get(f"{base}/ready?group=g")[0] == 200
            status, body = get(f"{base}/ready?group=nope")
            assert status == 404 and one_line(body) == "no node of group 'nope' is served here"
            assert get(f"{base}/health") == (200, "live\n")
            assert get(f"{base}/health", "HEAD") == (200, "")
            assert ("dledger_term", frozenset({"group": "g", "node": lead.config.self_id}.items())) in \
                scrape(endpoint.url)
            for path in ("/", "/metricsx", "/favicon.ico", "/metrics/", "/healthz"):
                status, body = get(f"{base}{path}")
                assert status == 404 and one_line(body).startswith(f"no such path '{path}'"), (path, body)
            status, body = get(f"{base}/ready", "POST")
            assert status == 405 and one_line(body) == "POST is not allowed: GET or HEAD"
        finally:
            c.close()
        status, body = get(f"{base}/ready")              # stopped: not ready, still live
        assert status == 503 and "is not running" in body
        assert get(f"{base}/health")[0] == 200
    with pytest.raises(OSError):
        get(f"{base}/health")                            # closed: the port no longer answers


def fake(group="g", node_id="n0", *, halted=None, started=True, suspect=None, role=Role.FOLLOWER, leader="n1",
         term=3, committed=10, announced=(3, 10)) -> NodeMetrics:
    """A ``NodeMetrics`` attached to a stand-in server in the given state."""
    member = SimpleNamespace(role=role, leader_id=leader, curr_term=term, committed_index=committed)
    server = SimpleNamespace(halted=halted, started=started, node=SimpleNamespace(member_state=member),
                             store=SimpleNamespace(suspect=suspect))
    m = NodeMetrics(group, node_id)
    m.server, m.leader_commit = server, announced
    return m


@pytest.mark.parametrize("state, reason", [
    (dict(halted="msync failed: EIO"), "g/n0 halted: msync failed: EIO"),
    (dict(started=False), "g/n0 is not running"),
    (dict(suspect=SimpleNamespace(value="UNCLEAN_SHUTDOWN")),
     "g/n0 is recovering (UNCLEAN_SHUTDOWN): it counts toward no quorum until it has caught up from a leader"),
    (dict(role=Role.CANDIDATE, leader=None), "g/n0 knows no leader (CANDIDATE in term 3)"),
    (dict(committed=10, announced=(3, 1011)),
     "g/n0 is 1001 entries behind the commit index of its leader n1 (ready within 1000)"),
])
def test_each_reason_a_node_is_not_ready_is_its_one_line_answer(state, reason):
    with serve(0, host="127.0.0.1") as endpoint:
        endpoint.collector.add(fake(**state))
        endpoint.collector.add(fake("h", "n0"))                   # a ready node of another group
        assert get(f"{endpoint.base_url}/ready") == (503, reason + "\n")
        assert get(f"{endpoint.base_url}/ready?group=h")[0] == 200
        live = get(f"{endpoint.base_url}/health")
        assert live == ((503, reason + "\n") if "halted" in state else (200, "live\n"))


def test_the_lag_bound_and_what_counts_as_behind():
    assert health.not_ready(fake(committed=10, announced=(3, 1010)), 1000) is None      # exactly the bound
    assert health.not_ready(fake(committed=10, announced=(3, 1011)), 1000) is not None
    assert health.not_ready(fake(committed=10, announced=(3, 11)), 0) is not None
    assert health.behind(fake(committed=10, announced=(2, 5000))) == 0       # an older term's announcement
    assert health.behind(fake(role=Role.LEADER, leader="n0", committed=10, announced=(3, 5000))) == 0
    with serve(0, host="127.0.0.1", ready_max_lag=0) as endpoint:
        endpoint.collector.add(fake(committed=10, announced=(3, 11)))
        assert get(f"{endpoint.base_url}/ready") == \
            (503, "g/n0 is 1 entries behind the commit index of its leader n1 (ready within 0)\n")
    assert get_nothing_served() == (503, "no node is served here\n")
    for bad in (-1, True, "10"):
        with pytest.raises(ValueError, match="ready_max_lag"):
            serve(0, host="127.0.0.1", ready_max_lag=bad)


def get_nothing_served():
    with serve(0, host="127.0.0.1") as endpoint:
        return get(f"{endpoint.base_url}/ready")


def test_a_follower_cut_off_while_the_group_commits_is_not_ready_until_it_caught_up():
    """Simulated time: the follower is partitioned while 3,000 entries commit, then healed with a
    low push quota, so it hears the leader's commit index long before its log holds it."""
    c = Cluster(n=3, seed=11, peer_push_quota=64 * 1024)
    try:
        assert c.run_until(lambda: c.leader() is not None, 5_000)
        lead = c.leader()
        lagger = next(n for n in c.ids if n != lead)
        metrics = {}
        for n in c.ids:
            metrics[n] = NodeMetrics("sim", n, clock=lambda: c.now_ms / 1000)
            c.servers[n].attach_metrics(metrics[n])
        c.run_for(1_000)
        assert all(health.not_ready(m, 1000) is None for m in metrics.values())
        c.partition([lagger], [n for n in c.ids if n != lagger])
        futures = [c.append(b"e" * 200, via=lead) for _ in range(3_000)]
        assert c.run_until(lambda: all(f.done() for f in futures), 30_000)
        assert all(f.result().code == 200 for f in futures)
        c.heal()
        m = metrics[lagger]
        assert c.run_until(lambda: health.behind(m) > 1000 and m.server.leader_id is not None, 30_000)
        why = health.not_ready(m, 1000)
        assert why is not None and why.startswith(f"sim/{lagger} is ") and "entries behind the commit index" in why, why
        assert c.run_until(lambda: health.not_ready(m, 1000) is None, 120_000)
        leader = c.servers[c.leader()]
        assert m.server.node.committed_index >= leader.node.committed_index - 1000
        c.check()
    finally:
        c.close()
