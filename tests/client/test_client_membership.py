"""DLedgerClient's membership calls against DLedgerServers over real TCP on 127.0.0.1, in one
process: a joining fourth node added (learner, then promoted), a member removed, the leader
removed (leadership moves first), a change found made after a lost answer, refusals returned.

Every wait is a client call bounded by its timeout or a polled condition with a deadline."""

import time

import pytest

from dledger import DLedgerClient, DLedgerServer
from dledger.client.membership import in_wanted_state, members_view
from dledger.protocol import DLedgerResponseCode as Code, MembershipResponse

from transport.tcp_helpers import WAIT, TcpGroup, free_ports


def wait_until(predicate, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


class JoiningGroup(TcpGroup):
    """Three bootstrap voters n0..n2 and a fourth port for n3, which starts with ``join``."""

    def __init__(self, base_dir, **cfg) -> None:
        ports = free_ports(4)
        super().__init__(base_dir, 3, ports=ports[:3], **cfg)
        self.n3_address = f"127.0.0.1:{ports[3]}"

    def start_joiner(self) -> DLedgerServer:
        cfg = self.config("n3")
        cfg = type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__ if cfg.__dataclass_fields__[f].init},
                           "peers": f"{self.peers};n3-{self.n3_address}", "join": True})
        s = DLedgerServer(cfg, runtime=self.runtime)
        self.servers["n3"] = s
        return s.startup()


@pytest.fixture
def group(tmp_path):
    g = JoiningGroup(tmp_path).start_all()
    yield g
    g.stop_all()


def test_add_member_adds_a_joining_node_as_learner_then_promotes_it(group):
    g = group
    g.leader()
    joiner = g.start_joiner()
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        for k in range(20):
            c.append(b"before-%d" % k)
        r = c.add_member("n3", g.n3_address, timeout_s=30)
        assert r.code == Code.SUCCESS, r
        assert set(r.voters) == {"n0", "n1", "n2", "n3"} and r.learners == {} and r.index > 20
        view = c.members()
        assert [(m["id"], m["role"]) for m in view["members"]] == [("n0", "voter"), ("n1", "voter"),
                                                                   ("n2", "voter"), ("n3", "voter")]
        assert view["config_index"] == r.index
        # the new voter holds the log: the leader's match index for it reaches the promotion's entry
        wait_until(lambda: c.members()["members"][3]["match_index"] >= r.index, "n3 to hold the promotion")
        wait_until(lambda: joiner.node.committed_index >= r.index, "n3 to commit the promotion")
        assert joiner.get(0).body == b"before-0"


def test_add_learner_then_promote_and_status_shows_member_match_and_lag(group):
    g = group
    g.leader()
    g.start_joiner()
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        c.append(b"x")
        r = c.add_learner("n3", g.n3_address)
        assert r.code == Code.SUCCESS and r.learners == {"n3": g.n3_address} and "n3" not in r.voters
        status = wait_until(lambda: (s := c.status()) and s["n3"].get("lag") == 0 and s,
                            "the learner to catch up in status")
        assert status["n3"]["member"] == "learner" and status["n3"]["match"] == r.index
        assert {status[n]["member"] for n in ("n0", "n1", "n2")} == {"voter"}
        p = c.promote("n3")
        assert p.code == Code.SUCCESS and "n3" in p.voters and p.learners == {}
        assert c.status()["n3"]["member"] == "voter"


def test_remove_member_removes_a_follower_and_a_second_remove_is_refused(group):
    g = group
    lead = g.leader().config.self_id
    follower = next(n for n in g.ids if n != lead)
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        r = c.remove_member(follower)
        assert r.code == Code.SUCCESS and follower not in r.voters and len(r.voters) == 2
        again = c.remove_member(follower)
        assert again.code == Code.UNKNOWN_MEMBER and follower in again.message
        assert c.append(b"after").code == Code.SUCCESS          # two voters commit
        assert follower not in c.metadata()["voters"]
        assert c.status()[follower]["member"] is None


def test_removing_the_leader_moves_leadership_and_the_client_asks_the_new_leader(group):
    g = group
    old = g.leader().config.self_id
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        c.append(b"x")
        r = c.remove_member(old)
        assert r.code == Code.SUCCESS, r
        assert old not in r.voters and len(r.voters) == 2
        assert c.leader_id != old and r.local_id == c.leader_id
        assert c.append(b"after").code == Code.SUCCESS


def test_refusals_come_back_as_the_leaders_answer(group):
    g = group
    g.leader()
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        assert c.add_learner("n1", "127.0.0.1:1").code == Code.UNEXPECTED_MEMBER
        assert c.promote("n1").code == Code.UNEXPECTED_ARGUMENT          # a voter already
        assert c.promote("n9").code == Code.UNEXPECTED_ARGUMENT
        with pytest.raises(ValueError):
            c.add_learner("n3", "no-port")
        with pytest.raises(ValueError):
            c.remove_member("bad-id")


def test_a_learner_that_cannot_catch_up_is_not_promoted_within_the_time(tmp_path):
    g = JoiningGroup(tmp_path, learner_max_lag_entries=0).start_all()
    try:
        g.leader()
        with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
            c.append(b"x")
            # n3 is never started: it holds nothing, so it never comes within 0 entries
            r = c.add_member("n3", g.n3_address, timeout_s=2)
            assert r.code == Code.FALL_BEHIND_TOO_MUCH and "n3" in r.learners
    finally:
        g.stop_all()


def test_a_change_whose_answer_was_lost_is_found_made_when_asked_again(group, monkeypatch):
    """The first answer is dropped as if the connection broke after the leader took the change:
    the client asks again, the leader refuses (already a member) and the configuration it
    carries shows the change made, so the call succeeds."""
    from dledger.client import connection

    g = group
    g.leader()
    real = connection.NodeConnection.request
    dropped = []

    async def lossy(self, msg, timeout):
        resp = await real(self, msg, timeout)
        if type(msg).__name__ == "MembershipRequest" and not dropped:
            dropped.append(resp)
            raise connection.AnswerLost("the connection broke")
        return resp

    monkeypatch.setattr(connection.NodeConnection, "request", lossy)
    with DLedgerClient(g.peers, "t", timeout_s=WAIT) as c:
        r = c.add_learner("n3", g.n3_address)
        assert dropped and dropped[0].code == Code.SUCCESS          # the lost answer said it was made
        assert r.code == Code.SUCCESS and r.index == -1 and "found made" in r.message
        assert r.learners == {"n3": g.n3_address}


def test_in_wanted_state_reads_the_configuration_an_answer_carries():
    resp = MembershipResponse(code=Code.UNEXPECTED_MEMBER, voters={"n0": "h:1"}, learners={"n3": "h:4"})
    assert in_wanted_state("add_learner", "n3", "h:4", resp)
    assert not in_wanted_state("add_learner", "n3", "h:9", resp)            # another address
    assert in_wanted_state("promote", "n0", "", resp) and not in_wanted_state("promote", "n3", "", resp)
    assert in_wanted_state("remove", "n7", "", resp) and not in_wanted_state("remove", "n3", "", resp)
    assert not in_wanted_state("remove", "n7", "", MembershipResponse(code=Code.UNKNOWN_MEMBER))


def test_members_view_computes_each_members_lag_from_the_leaders_log_end():
    view = members_view({"leader_id": "n0", "term": 2, "config_index": 5, "ledger_end_index": 10,
                         "committed_index": 10, "voters": {"n1": "h:2", "n0": "h:1"}, "learners": {"n3": "h:4"},
                         "match_index": {"n0": 10, "n1": 7, "n3": -1}})
    assert [(m["id"], m["role"], m["match_index"], m["lag"]) for m in view["members"]] == [
        ("n0", "voter", 10, 0), ("n1", "voter", 7, 3), ("n3", "learner", -1, None)]
