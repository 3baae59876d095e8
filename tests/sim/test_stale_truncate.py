"""A TRUNCATE replayed from long ago must not cut a follower's log (soak seed 400123).

DLedger's leader sends TRUNCATE right after a COMPARE matched; a copy of one that the network
delays or replays can arrive after the follower restarted, when its new process has verified
nothing yet. Before the fix, seed 400123 (3 nodes, fsync) lost every committed entry of a
follower that way: a TRUNCATE at 0 from the first seconds of term 0 reached it after a restart,
the cut passed, and the next leader, elected with that follower's vote, lacked them.

The follower only checks that a COMPARE matched the index before the cut in this term, and at
-1 every log matches, so a TRUNCATE at 0 always passes. The guard: a TRUNCATE names the term of
the leader's entry at the cut (its own term where its log ended), and an entry of that term
there is the leader's own, never cut; with or without a replayed COMPARE before it.
"""

from dledger.protocol import PushEntryRequest, PushEntryType, HeartBeatRequest
from dledger.sim import Cluster


def _record(c, follower):
    seen = []

    def tap(env):
        if env.dst == follower and isinstance(env.msg, (PushEntryRequest, HeartBeatRequest)) and not env.is_response:
            seen.append(env)
        return False

    c.network.drop_if = tap
    return seen


def _first(seen, kind, index):
    return next(e for e in seen if isinstance(e.msg, PushEntryRequest) and e.msg.type == kind
                and e.msg.pre_log_index == index)


def _acked(c, n):
    for k in range(n):
        f = c.append(b"acked-%d" % k)
        assert c.run_until(f.done, 2_000) and f.result().ok


def _run(tmp_path, replay_compare: bool):
    with Cluster(n=3, seed=31, store="file", base_dir=tmp_path, durability="fsync") as c:
        seen = _record(c, "n1")
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        _acked(c, 6)
        c.run_for(300)
        truncate = _first(seen, PushEntryType.TRUNCATE, 0)
        compare = _first(seen, PushEntryType.COMPARE, -1)
        heartbeat = next(e for e in seen if isinstance(e.msg, HeartBeatRequest))
        end = c.servers["n1"].store.ledger_end_index
        assert end >= 5
        c.restart("n1")
        # only the old frames reach it: the leader's new ones are lost on the way
        c.network.drop_if = lambda env: env.src == lead and env.dst == "n1"
        replay = [heartbeat] + ([compare] if replay_compare else []) + [truncate]
        for k, env in enumerate(replay):
            c.network.replay_envelope(env, 1 + 2 * k)
        c.run_for(50)
        assert c.servers["n1"].store.ledger_end_index == end, "a replayed TRUNCATE cut the log"
        c.network.drop_if = None
        _acked(c, 2)
        c.run_for(500)
        c.check()
        return lead


def test_a_replayed_truncate_after_a_restart_cuts_no_entry_of_the_leaders_term(tmp_path):
    assert _run(tmp_path, replay_compare=False) != "n1"


def test_a_replayed_compare_then_truncate_cuts_no_entry_of_the_leaders_term(tmp_path):
    assert _run(tmp_path, replay_compare=True) != "n1"
