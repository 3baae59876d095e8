"""Java DLedger's HeartbeatRequestTest, VoteRequestTest and AppendAndReadTest against running nodes
in the simulator: crafted requests go through the simulated network, answers are captured."""

from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, HeartBeatResponse, ReadMode,
                              VoteRequest, VoteResponse, VoteResult as R)
from dledger.sim import Cluster


class Probe:
    """Sends crafted requests as ``src`` and captures the answers (which never reach ``src``)."""

    def __init__(self, c: Cluster, src: str) -> None:
        self.c, self.src, self.answers, self.rid, self.sent = c, src, {}, -1_000, set()
        prev = c.network.drop_if

        def capture(env):
            if env.is_response and env.request_id in self.sent and env.dst == self.src:
                self.answers[env.request_id] = env.msg
                return True
            return prev(env) if prev else False

        c.network.drop_if = capture

    def ask(self, dst: str, msg):
        self.rid -= 1                   # negative ids: never used by a node
        rid = self.rid
        self.sent.add(rid)
        self.c.network._send(Envelope(self.src, dst, rid, False, msg))
        assert self.c.run_until(lambda: rid in self.answers, 500)
        return self.answers.pop(rid)


def test_heartbeat_requests_are_answered_by_the_rules():
    with Cluster(n=3, seed=1, leader="n1") as c:
        c.crash("n2")
        p = Probe(c, "n1")
        term = c.servers["n0"].node.term

        def hb(leader, t):
            return p.ask("n0", HeartBeatRequest(group="sim", local_id=leader, remote_id="n0", leader_id=leader, term=t))

        assert hb("n3", term).code == Code.UNKNOWN_MEMBER
        assert hb("n0", term).code == Code.UNEXPECTED_MEMBER
        assert hb("n1", term - 1).code == Code.EXPIRED_TERM if term > 0 else True
        assert hb("n2", term).code == Code.INCONSISTENT_LEADER
        assert hb("n1", term).code == Code.SUCCESS
        assert hb("n1", term + 1).code == Code.TERM_NOT_READY
        c.run_for(100)
        assert hb("n1", term + 1).code == Code.SUCCESS
        assert isinstance(hb("n1", term + 1), HeartBeatResponse)


def test_vote_requests_are_answered_by_the_rules():
    with Cluster(n=2, seed=2, leader="n0") as c:
        p = Probe(c, "n1")
        term = c.servers["n1"].node.term

        def vote(candidate, t, end_index=-1, end_term=-1):
            r = p.ask("n1", VoteRequest(group="sim", local_id=candidate, remote_id="n1", leader_id=candidate,
                                        term=t, ledger_end_index=end_index, ledger_end_term=end_term))
            assert isinstance(r, VoteResponse)
            return r.vote_result

        assert vote("n2", term) == R.REJECT_UNKNOWN_LEADER
        assert vote("n1", term) == R.REJECT_UNEXPECTED_LEADER
        assert vote("n0", term) == R.ACCEPT                        # re-vote for its own leader
        assert vote("n0", term - 1) == R.REJECT_EXPIRED_VOTE_TERM if term > 0 else True
        f = c.append(b"x")
        assert c.run_until(f.done, 500) and f.result().ok
        assert vote("n0", term, end_index=-1, end_term=-1) == R.REJECT_EXPIRED_LEDGER_TERM
        assert vote("n0", term, end_index=-1, end_term=term) == R.REJECT_SMALL_LEDGER_END_INDEX


def test_reads_after_writes_see_the_writes_through_a_key_value_state_machine():
    class KV:
        def __init__(self):
            self.data = {}

        def on_apply(self, entries):
            for a in entries:
                k, v = a.entry.body.split(b"=")
                self.data[int(k)] = int(v)

    machines = {}

    def factory(node_id):
        machines[node_id] = KV()
        return machines[node_id]

    with Cluster(n=3, seed=3, state_machine_factory=factory) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()

        def read_all():
            f = c.read(ReadMode.RAFT_LOG_READ)
            assert c.run_until(f.done, 1_000) and f.result().code == Code.SUCCESS
            return [machines[lead].data.get(k, -1) for k in range(1, 11)]

        assert read_all() == [-1] * 10
        for factor in (10, 20):
            futures = [c.append(b"%d=%d" % (k, factor * k)) for k in range(1, 11)]
            assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
            assert read_all() == [factor * k for k in range(1, 11)]
