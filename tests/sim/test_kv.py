"""The key-value register machine on the log (``dledger.sim.kv``) and its linearizability check:
commands round-trip, the machine applies them, a fault-free cluster gives a linearizable history,
and a broken machine or a stale get is caught."""

from hypothesis import given, strategies as st

from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.sim import Cluster
from dledger.sim.kv import KVRecorder, KVStateMachine, decode, encode_cas, encode_put
from dledger.sim.linearizability import CheckResult

token = st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=8)


@given(st.integers(0, 10**9), token, token, st.one_of(st.none(), token))
def test_commands_round_trip(op_id, key, value, expected):
    assert decode(encode_put(op_id, key, value)) == ("put", key, value)
    assert decode(encode_cas(op_id, key, expected, value)) == ("cas", key, expected, value)


def test_bodies_that_are_not_commands_are_ignored():
    assert decode(b"s1-c0-4") is None and decode(b"kv 1 del k") is None


def test_the_machine_puts_and_swaps_only_on_a_match():
    sm = KVStateMachine("n0")
    assert sm.apply_command(("cas", "k", None, "1")) is True
    assert sm.apply_command(("cas", "k", "0", "2")) is False
    assert sm.apply_command(("put", "k", "3")) is True
    assert sm.apply_command(("cas", "k", "3", "4")) is True
    assert sm.state == {"k": "4"}


class Session:
    """A client doing one operation at a time against a cluster, recording each for the checker."""

    def __init__(self, c: Cluster, machines=None) -> None:
        self.c, self.kv = c, KVRecorder()
        self.machines = machines if machines is not None else c.state_machines

    def write(self, inp):
        op_id = self.kv.new_id()
        self.kv.invoke(op_id, 0, inp, self.c.now_ms)
        body = encode_put(op_id, inp[1], inp[2]) if inp[0] == "put" else encode_cas(op_id, *inp[1:])
        f = self.c.write(body)
        assert self.c.run_until(f.done, 2_000)
        resp, result = f.result()
        self.kv.complete_write(op_id, self.c.now_ms, resp, result)
        self.c.run_for(1)       # the next call starts strictly later (equal times are concurrent)
        return resp, result

    def get(self, key, mode=ReadMode.READ_INDEX_READ, via=None, record_as_linearizable=True):
        op_id = self.kv.new_id()
        node = via or self.c.leader()
        self.kv.invoke(op_id, 0, ("get", key), self.c.now_ms)
        f = self.c.read(mode, via=node)
        assert self.c.run_until(f.done, 2_000) and f.result().code == Code.SUCCESS
        index = f.result().index
        assert self.c.run_until(lambda: self.c.servers[node].node.applied_index >= index, 2_000)
        value = self.machines[node].state.get(key)
        if record_as_linearizable:
            self.kv.complete_get(op_id, self.c.now_ms, value)
        return value


def test_a_fault_free_cluster_gives_a_linearizable_key_value_history():
    with Cluster(n=3, seed=4, state_machine_factory=KVStateMachine) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        s = Session(c)
        assert s.get("a") is None
        assert s.write(("put", "a", "1"))[0].code == Code.SUCCESS
        for mode in (ReadMode.RAFT_LOG_READ, ReadMode.READ_INDEX_READ, ReadMode.LEASE_READ):
            assert s.get("a", mode) == "1"
        assert s.write(("cas", "a", "1", "2"))[1] is True
        assert s.write(("cas", "a", "1", "3"))[1] is False
        assert s.get("a") == "2" and s.get("b") is None
        assert s.kv.check().result is CheckResult.OK
        c.check()


class DropsEveryOtherPut(KVStateMachine):
    """A broken machine: it acknowledges every put but applies only the odd-numbered ones."""

    def apply_command(self, cmd):
        if cmd[0] == "put" and int(cmd[2]) % 2 == 0:
            return True
        return super().apply_command(cmd)


def test_a_machine_that_loses_acknowledged_puts_is_caught():
    with Cluster(n=3, seed=5, state_machine_factory=DropsEveryOtherPut) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        s = Session(c)
        for value in ("1", "2", "3"):
            s.write(("put", "k", value))
            s.get("k")
        verdict = s.kv.check()
        assert verdict.result is CheckResult.ILLEGAL, verdict.describe()


def test_a_stale_get_from_a_cut_off_replica_is_caught():
    with Cluster(n=3, seed=6, state_machine_factory=KVStateMachine) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        s = Session(c)
        s.write(("put", "k", "old"))
        lead = c.leader()
        follower = next(i for i in c.ids if i != lead)
        assert c.run_until(lambda: c.servers[follower].node.applied_index >= c.servers[lead].node.applied_index, 1_000)
        c.partition([follower], [i for i in c.ids if i != follower])
        s.write(("put", "k", "new"))
        # a get served from the cut-off follower's state, recorded as if it were linearizable
        assert s.get("k", ReadMode.UNSAFE_READ, via=follower) == "old"
        assert s.kv.check().result is CheckResult.ILLEGAL
        # the same get recorded as what it is (an unsafe read) is not checked
        s2 = Session(c)
        s2.write(("put", "k", "newer"))
        s2.get("k", ReadMode.UNSAFE_READ, via=follower, record_as_linearizable=False)
        assert s2.kv.check().result is CheckResult.OK


def test_unclear_writes_are_indeterminate_and_definite_failures_are_left_out():
    kv = KVRecorder()
    kv.invoke(1, 0, ("put", "k", "1"), 0)          # never answered: may or may not have happened
    kv.invoke(2, 0, ("put", "k", "2"), 0)

    class Resp:
        code = Code.NOT_LEADER

    kv.complete_write(2, 5, Resp(), None)           # refused: it had no effect
    kv.invoke(3, 1, ("get", "k"), 10)
    kv.complete_get(3, 20, "1")
    ops = kv.ops()
    assert [op.input[0] for op in ops] == ["put", "get"] and ops[0].indeterminate
    assert kv.check().result is CheckResult.OK
    kv.invoke(4, 1, ("get", "k"), 30)
    kv.complete_get(4, 40, "2")                     # the refused put's value: impossible
    assert kv.check().result is CheckResult.ILLEGAL
