"""Replication scenarios of the reliability catalogue (docs/catalogue.md), in virtual time.

Each test names the behaviour it proves; its docstring names the catalogue row.
``Cluster.check()`` at the end of each also checks one leader per term, agreed committed
prefixes, commit indexes that never go back, and every acknowledged append in the agreed log.
"""

import random

import pytest

from dledger.config import DLedgerConfig
from dledger.core import Node, Role
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, PushEntryRequest,
                              PushEntryResponse, PushEntryType)
from dledger.store import DLedgerMemoryStore
from dledger.sim import Cluster
from dledger.sim.network import NetworkOptions


def _leader(c: Cluster) -> str:
    assert c.run_until(lambda: c.leader() is not None, 3_000)
    return c.leader()


@pytest.mark.parametrize("seed", range(5))
def test_pipelined_appends_under_delay_reordering_and_duplication_agree_everywhere(seed):
    """RP-01: five nodes, 300 appends fired without waiting (pipelined, batched into pushes),
    messages delayed 1-30 ms (so they overtake each other) and 30 % duplicated. Every append
    is acknowledged at its own index and every replica ends with the same log."""
    with Cluster(n=5, seed=seed, network=NetworkOptions(min_delay_ms=1, max_delay_ms=30, duplicate=0.3)) as c:
        _leader(c)
        futures = [c.append(b"p%03d" % k) for k in range(300)]
        assert c.run_until(lambda: all(f.done() for f in futures), 10_000)
        assert all(f.result().ok for f in futures)
        indexes = [f.result().index for f in futures]
        assert len(set(indexes)) == 300
        end = max(indexes)
        assert c.run_until(lambda: all(s.store.ledger_end_index == end and s.node.committed_index == end
                                       for s in c.servers.values()), 3_000)
        logs = {i: [bytes(s.store.get_raw(k)) for k in range(end + 1)] for i, s in c.servers.items()}
        assert all(log == logs["n0"] for log in logs.values())
        c.check()


# seed 2 is left out: there a push resent before the transfer tells C the commit index, so
# the scenario (a new leader that knows less than B) does not arise
@pytest.mark.parametrize("seed", [0, 1, 3, 4, 5])
def test_a_new_leader_with_a_lower_commit_index_never_moves_a_followers_commit_back(seed):
    """RP-03 (PySyncObj#166): B learnt that entry X committed, C did not (the commit hints to
    C are lost). Leadership moves to C, whose heartbeats then carry a commit index below B's.
    B's commit index never goes back."""
    with Cluster(n=3, seed=seed) as c:
        lead = _leader(c)
        b, cc = [i for i in c.ids if i != lead]

        def no_commit_news_for_c(env):
            msg = env.msg
            return env.dst == cc and (isinstance(msg, HeartBeatRequest) or (
                isinstance(msg, PushEntryRequest) and msg.type == PushEntryType.COMMIT))

        f = c.append(b"x")
        assert c.run_until(f.done, 1_000) and f.result().ok
        c.network.drop_if = no_commit_news_for_c
        g = c.append(b"y")                       # C gets the entry, never the news that it committed
        assert c.run_until(lambda: g.done() and c.servers[b].node.committed_index >= g.result().index, 1_000)
        assert c.servers[cc].node.committed_index < g.result().index
        t = c.servers[lead].transfer_leadership(cc)
        seen, at_election = [], None
        cc_before = c.servers[cc].node.committed_index     # C's commit index the step before it led
        while not t.done() or len(seen) < 1_000:
            c.run_for(1)
            seen.append(c.servers[b].node.committed_index)
            if at_election is None and c.servers[cc].role is Role.LEADER:
                at_election = (cc_before, c.servers[b].node.committed_index)
                c.network.drop_if = None
            elif at_election is None:
                cc_before = c.servers[cc].node.committed_index
        assert t.result().code == Code.SUCCESS and c.leader() == cc
        assert at_election[0] < at_election[1]            # the new leader knew less than B
        assert seen == sorted(seen) and seen[0] >= g.result().index
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_a_follower_that_kept_three_of_a_batch_of_four_accepts_the_resend_and_catches_up(seed):
    """RP-07 (DLedger#142): a follower crashed after writing the first three entries of a
    batch of four (its answer never left). On its return the leader resends from what it
    knows; the three matching entries are accepted again as they are (not rewritten), the
    fourth is added, within a few round trips."""
    with Cluster(n=3, seed=seed, strict_history=False) as c:      # the batch is not in the history
        lead = _leader(c)
        follower = next(i for i in c.ids if i != lead)
        first = c.append(b"base")
        assert c.run_until(lambda: first.done() and c.servers[follower].store.ledger_end_index == 0, 1_000)
        # no answer gets through: the batch is not committed anywhere when the follower dies
        c.network.drop_if = lambda env: isinstance(env.msg, PushEntryResponse)
        batch = c.servers[lead].batch_append([b"b1", b"b2", b"b3", b"b4"])
        assert c.run_until(lambda: c.servers[follower].store.ledger_end_index == 4, 1_000)
        kept = [bytes(c.servers[follower].store.get_raw(k)) for k in range(4)]
        c.crash(follower)
        c._memory[follower].truncate(4)          # the crash left entries 0..3, not the 4th of the batch
        c.network.drop_if = None
        pushes = []
        c.network.drop_if = lambda env: pushes.append(env.msg.type) if (
            env.dst == follower and isinstance(env.msg, PushEntryRequest)) else False
        c.restart(follower)
        assert c.run_until(lambda: c.servers[follower].store.ledger_end_index == 4, 2_000)
        assert [bytes(c.servers[follower].store.get_raw(k)) for k in range(4)] == kept
        assert len(pushes) <= 6, pushes
        assert c.run_until(batch.done, 1_000) and batch.result().ok
        c.check()


def test_a_resent_batch_whose_first_entries_the_follower_holds_is_accepted_without_rewriting_them():
    """RP-07 at the follower (DLedger#142): it holds entries 0..3 of the leader's 0..4 (an
    I/O error stopped it after the third entry of the batch 1..4); the leader resends the
    whole batch. The follower acknowledges it, keeps the three entries it had (no
    truncation, no rewrite) and adds the fourth; a second copy of the same push changes
    nothing."""
    leader = DLedgerMemoryStore(data_file_size=1 << 16)
    leader.persist_term(2, "n1")
    leader.batch_append_as_leader([b"base", b"b1", b"b2", b"b3", b"b4"])
    store = DLedgerMemoryStore(data_file_size=1 << 16)
    store.persist_term(2, None)
    store.batch_append_as_follower(leader.get_raw_range(0, 1 << 20)[0][:sum(len(leader.get_raw(k)) for k in range(4))],
                                   2, "n1")
    assert store.ledger_end_index == 3
    store.clear_suspect()                # a member in good standing (not recovering)
    cuts = []
    truncate = store.truncate
    store.truncate = lambda index: cuts.append(index) or truncate(index)
    node = Node(DLedgerConfig(self_id="n0", peers="n0-h:1;n1-h:2;n2-h:3", group="g").validate(), store,
                random.Random(1))
    node.receive(0, Envelope("n1", "n0", 1, False, HeartBeatRequest(group="g", local_id="n1", remote_id="n0",
                                                                   leader_id="n1", term=2)))
    before = [bytes(store.get_raw(k)) for k in range(4)]
    resend = PushEntryRequest(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2,
                              type=PushEntryType.APPEND, first_entry_index=1, count=4, last_entry_term=2,
                              pre_log_index=0, pre_log_term=2,
                              entries=b"".join(bytes(leader.get_raw(k)) for k in range(1, 5)))
    for rid in (7, 8):
        node.take_ready()
        node.receive(1, Envelope("n1", "n0", rid, False, resend))
        answers = [m.msg for m in node.take_ready().messages if m.request_id == rid]
        assert [a.code for a in answers] == [Code.SUCCESS]
        assert store.ledger_end_index == 4 and cuts == []
        assert [bytes(store.get_raw(k)) for k in range(4)] == before
        assert bytes(store.get_raw(4)) == bytes(leader.get_raw(4))


@pytest.mark.parametrize("seed", range(5))
def test_a_follower_whose_answers_are_lost_for_five_push_timeouts_catches_up_without_a_resend_storm(seed):
    """RP-08 (DLedger#251/#331): every answer of one follower is lost for five push
    timeouts while appends go on (they commit with the other follower). The leader resends
    a bounded number of pushes (at most its in-flight window per timeout, plus heartbeats'
    commit pushes), and once answers get through the follower's end reaches the leader's."""
    with Cluster(n=3, seed=seed) as c:
        lead = _leader(c)
        follower = next(i for i in c.ids if i != lead)
        cfg = c.servers[lead].config
        first = c.append(b"first")                  # the follower is matched: the leader streams APPENDs to it
        assert c.run_until(lambda: first.done() and c.servers[follower].store.ledger_end_index == 0, 1_000)
        sent = []

        def lose_answers(env):
            if env.dst == follower and isinstance(env.msg, PushEntryRequest):
                sent.append(env.msg.type)
            return env.src == follower and isinstance(env.msg, PushEntryResponse)

        c.network.drop_if = lose_answers
        futures = []
        for k in range(50):
            futures.append(c.append(b"w%d" % k))
            c.run_for(5 * cfg.max_push_timeout_ms // 50)
        assert all(f.done() and f.result().ok for f in futures)
        appends = [t for t in sent if t == PushEntryType.APPEND]
        assert len(appends) <= (5 + 2) * cfg.max_push_in_flight + 50, len(appends)
        c.network.drop_if = None
        end = c.servers[lead].store.ledger_end_index
        assert c.run_until(lambda: c.servers[follower].store.ledger_end_index == end, 2 * cfg.max_push_timeout_ms)
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_with_one_follower_dead_and_one_slow_every_ack_waits_for_the_slow_one(seed):
    """RP-12: three nodes, one dead, the other behind a slow link (40-80 ms). Appends commit
    with the leader and the slow follower, and each is acknowledged only once the slow
    follower holds it."""
    with Cluster(n=3, seed=seed) as c:
        lead = _leader(c)
        dead, slow = [i for i in c.ids if i != lead]
        c.crash(dead)
        c.network.set_link(lead, slow, 40, 80)
        c.network.set_link(slow, lead, 40, 80)
        early = []

        def held_by_slow(f):
            r = f.result()
            if r.ok and c.servers[slow].store.ledger_end_index < r.index:
                early.append(r.index)

        futures = []
        for k in range(30):
            f = c.append(b"s%d" % k)
            f.add_done_callback(held_by_slow)
            futures.append(f)
            c.run_for(10)
        assert c.run_until(lambda: all(f.done() for f in futures), 5_000)
        assert all(f.result().ok for f in futures) and early == []
        c.check()


def test_a_single_fsync_node_keeps_every_acknowledged_append_across_power_losses(tmp_path):
    """RP-13 (etcd#14370): n = 1 in fsync mode, power cut right after each acknowledgement;
    every acknowledged append is there after the restart, at its index."""
    with Cluster(n=1, seed=1, store="file", base_dir=tmp_path, durability="fsync") as c:
        acked = {}
        for k in range(15):
            _leader(c)
            f = c.append(b"a%d" % k)
            assert c.run_until(f.done, 1_000) and f.result().ok
            acked[f.result().index] = b"a%d" % k
            c.power_loss("n0")
            c.restart("n0")
            store = c.servers["n0"].store
            assert {i: bytes(store.get(i).body) for i in acked} == acked
        _leader(c)
        last = c.append(b"last")                 # the restarted node commits again, then the checks
        assert c.run_until(last.done, 1_000) and last.result().ok
        c.check()


@pytest.mark.parametrize("seed", range(5))
def test_an_append_replicated_to_one_follower_before_the_leader_dies_is_never_acknowledged(seed):
    """RP-14: five nodes; the leader takes an append, pushes reach one follower only, then
    the leader crashes. The client never sees SUCCESS; the entry appears at most once in the
    agreed log (it may survive if that follower is elected)."""
    with Cluster(n=5, seed=seed) as c:
        lead = _leader(c)
        base = c.append(b"base")
        assert c.run_until(base.done, 1_000) and base.result().ok
        lucky = next(i for i in c.ids if i != lead)
        c.network.drop_if = lambda env: isinstance(env.msg, PushEntryRequest) and env.dst not in (lucky,)
        f = c.append(b"orphan")
        assert c.run_until(lambda: c.servers[lucky].store.ledger_end_index > base.result().index, 1_000)
        c.crash(lead)
        c.network.drop_if = None
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        after = c.append(b"after")
        assert c.run_until(after.done, 2_000) and after.result().ok
        c.run_for(500)
        assert f.done() and (f.exception() is not None or not f.result().ok)
        assert [e.body for e in c.committed_log()].count(b"orphan") <= 1
        c.check()


@pytest.mark.parametrize("seed", range(3))
def test_a_node_with_an_empty_store_catches_up_a_long_log_steadily_in_bounded_time(seed):
    """MB-03 (RocketMQ#1778): membership is static, so a "new" node is a listed peer whose
    store is empty while the others hold 5,000 entries. Its log end only grows, it holds the
    whole log within two seconds, and the leader sends it a bounded number of pushes (about
    one per batch, not a busy loop of refusals)."""
    with Cluster(n=3, seed=seed) as c:
        lead = _leader(c)
        new = next(i for i in c.ids if i != lead)
        c.crash(new)
        for k in range(0, 5_000, 500):
            futures = [c.append(b"e%05d" % j) for j in range(k, k + 500)]
            assert c.run_until(lambda: all(f.done() and f.result().ok for f in futures), 3_000)
        end = c.servers[lead].store.ledger_end_index
        c._memory[new] = DLedgerMemoryStore(data_file_size=c.config_for(new).mapped_file_size_for_entry_data)
        pushes = []
        c.network.drop_if = lambda env: pushes.append(env.msg.type) if (
            env.dst == new and isinstance(env.msg, PushEntryRequest)) else False
        c.restart(new)
        ends = []
        while c.servers[new].store.ledger_end_index < end:
            assert c.now_ms < 60_000
            c.run_for(5)
            ends.append(c.servers[new].store.ledger_end_index)
        assert ends == sorted(ends) and len(ends) * 5 <= 2_000
        appends = [t for t in pushes if t == PushEntryType.APPEND]
        cfg = c.servers[lead].config
        size = sum(len(c.servers[lead].store.get_raw(k)) for k in range(end + 1))
        batches = max(-(-size // cfg.max_batch_append_size), -(-(end + 1) // cfg.max_batch_append_count))
        assert len(appends) <= 2 * batches + 10, (len(appends), batches)
        assert len(pushes) - len(appends) <= 20
        c.check()
