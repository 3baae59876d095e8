"""Membership changes in the simulator: learners, promotion, removal, one change at a time,
the configuration entry in the log, and the configuration kept across restarts.

Every scenario runs the production server on simulated time (``dledger.sim.Cluster``) and ends
with the cluster's checks (every acknowledged append committed once, replicas byte-identical,
at most one leader per term).
"""

from __future__ import annotations

import pytest

from dledger.core import Role
from dledger.core.membership import Configuration
from dledger.entry import MAGIC_CONFIG_CHANGE
from dledger.errors import DLedgerResponseCode as Code
from dledger.protocol import VoteRequest
from dledger.sim import Cluster


def settle(c: Cluster, ms: int = 3_000) -> str:
    assert c.run_until(lambda: c.leader() is not None, ms)
    return c.leader()


def done(c: Cluster, f, ms: int = 10_000):
    assert c.run_until(f.done, ms), "the change did not finish"
    return f.result()


def load(c: Cluster, n: int, tag: str) -> list:
    return [c.append(f"{tag}{i}".encode()) for i in range(n)]


def acked(c: Cluster, futures: list, ms: int = 10_000) -> None:
    assert c.run_until(lambda: all(f.done() for f in futures), ms)
    outcomes = [f.exception() or Code(f.result().code).name for f in futures]
    assert all(o == "SUCCESS" for o in outcomes), outcomes


def test_learners_get_the_log_and_count_toward_no_commit():
    with Cluster(n=3, seed=11) as c:
        settle(c)
        acked(c, load(c, 10, "a"))
        for node_id in ("n3", "n4"):
            c.add_node(node_id)
            resp = done(c, c.add_learner(node_id))
            assert resp.code == Code.SUCCESS and node_id in resp.learners and node_id not in resp.voters
        acked(c, load(c, 10, "b"))
        c.run_for(500)
        leader = c.leader()
        end = c.servers[leader].store.ledger_end_index
        for node_id in ("n3", "n4"):
            assert c.servers[node_id].store.ledger_end_index == end          # it holds the whole log
            assert c.members(node_id) == (["n0", "n1", "n2"], ["n3", "n4"])
        # two voters down: the leader and two learners would be three of five members, but they
        # are one of the three voters: nothing commits
        for p in ("n0", "n1", "n2"):
            if p != leader:
                c.crash(p)
        f = c.append(b"needs-a-voter")
        c.run_for(1_500)
        assert not f.done() or f.result().code != Code.SUCCESS
        assert c.servers[leader].node.committed_index == end
        assert all(c.servers[p].role is not Role.LEADER for p in ("n3", "n4"))
        c.check()


def test_a_learner_never_stands_for_election():
    with Cluster(n=3, seed=12) as c:
        settle(c)
        c.add_node("n3")
        n3 = c.servers["n3"].node
        assert done(c, c.add_learner("n3")).code == Code.SUCCESS
        assert c.run_until(lambda: n3.member_state.configuration is not None, 5_000)
        for p in ("n0", "n1", "n2"):
            c.crash(p)
        c.run_for(5_000)
        assert n3.role is not Role.LEADER and n3.elector.voting.round is None
        assert n3.term == max(c.servers[p].node.term for p in ("n0", "n1", "n2"))     # it moved no term
        c.check()


def test_add_member_is_learner_then_voter_and_the_group_goes_3_5_3_under_load():
    with Cluster(n=3, seed=13) as c:
        settle(c)
        futures = load(c, 20, "a")
        for node_id in ("n3", "n4"):
            c.add_node(node_id)
            futures += load(c, 5, node_id)
            resp = done(c, c.add_member(node_id))
            assert resp.code == Code.SUCCESS and node_id in resp.voters, resp
        assert c.members() == (["n0", "n1", "n2", "n3", "n4"], [])
        for node_id in ("n0", "n1"):
            futures += load(c, 5, f"rm{node_id}")
            resp = done(c, c.remove_member(node_id))
            if resp.code == Code.LEADER_TRANSFERRING:        # it led: leadership moved first
                assert c.run_until(lambda: c.leader() not in (None, node_id), 5_000)
                resp = done(c, c.remove_member(node_id))
            assert resp.code == Code.SUCCESS, resp
        acked(c, futures)
        c.run_for(2_000)
        assert c.members() == (["n2", "n3", "n4"], [])
        for node_id in ("n2", "n3", "n4"):
            assert c.members(node_id) == (["n2", "n3", "n4"], [])
        acked(c, load(c, 10, "after"))
        c.check()


def test_removing_the_leader_hands_leadership_to_the_most_caught_up_voter_first():
    with Cluster(n=3, seed=14) as c:
        leader = settle(c)
        acked(c, load(c, 10, "a"))
        resp = done(c, c.remove_member(leader, via=leader))
        assert resp.code == Code.LEADER_TRANSFERRING and "leadership moves to" in resp.message
        assert c.run_until(lambda: c.leader() not in (None, leader), 5_000)
        new = c.leader()
        assert done(c, c.remove_member(leader)).code == Code.SUCCESS
        c.run_for(3_000)
        assert c.members() == (sorted(p for p in ("n0", "n1", "n2") if p != leader), [])
        # the removed node learnt it is out: it stands for nothing, and the group keeps its term
        old = c.servers[leader].node
        assert old.member_state.configuration is not None and not old.member_state.is_voter()
        term = c.servers[new].node.term
        c.run_for(5_000)
        assert c.leader() == new and c.servers[new].node.term == term
        acked(c, load(c, 5, "b"))
        c.check()


def test_changes_go_one_at_a_time():
    with Cluster(n=3, seed=15) as c:
        leader = settle(c)
        acked(c, load(c, 3, "a"))
        c.add_node("n3")
        c.add_node("n4")
        first = c.add_learner("n3", via=leader)
        second = c.add_learner("n4", via=leader)       # asked before the first one committed
        assert done(c, second).code == Code.MEMBERSHIP_CHANGE_PENDING
        assert "one at a time" in second.result().message
        assert done(c, first).code == Code.SUCCESS
        assert done(c, c.add_learner("n4")).code == Code.SUCCESS
        c.check()


@pytest.mark.parametrize("op, node_id, code, words", [
    ("promote", "n1", Code.UNEXPECTED_ARGUMENT, "already a voter"),
    ("promote", "n9", Code.UNEXPECTED_ARGUMENT, "not a member"),
    ("remove", "n9", Code.UNKNOWN_MEMBER, "not a member"),
    ("add_learner", "n1", Code.UNEXPECTED_MEMBER, "already a member"),
])
def test_refusals_say_what_is_wrong_and_change_nothing(op, node_id, code, words):
    with Cluster(n=3, seed=16) as c:
        leader = settle(c)
        acked(c, load(c, 2, "a"))
        server = c.servers[leader]
        end = server.store.ledger_end_index
        f = server.add_learner(node_id, "127.0.0.1:1") if op == "add_learner" else \
            server.promote(node_id) if op == "promote" else server.remove_member(node_id)
        resp = done(c, f)
        assert resp.code == code and words in resp.message, resp
        assert server.store.ledger_end_index == end
        assert c.members() == (["n0", "n1", "n2"], [])


def test_a_follower_refuses_changes_naming_the_leader():
    with Cluster(n=3, seed=17) as c:
        leader = settle(c)
        c.run_for(500)                                       # every follower heard of it
        follower = next(p for p in ("n0", "n1", "n2") if p != leader)
        resp = done(c, c.servers[follower].add_learner("n3", "127.0.0.1:1"))
        assert resp.code == Code.NOT_LEADER and leader in resp.message and resp.leader_id == leader


def test_a_learner_that_does_not_catch_up_is_not_promoted():
    with Cluster(n=3, seed=18, learner_max_lag_entries=5) as c:
        settle(c)
        c.add_node("n3")
        c.crash("n3")
        assert done(c, c.add_learner("n3")).code == Code.SUCCESS
        resp = done(c, c.promote("n3"))               # it never answered: not caught up
        assert resp.code == Code.FALL_BEHIND_TOO_MUCH and "not caught up" in resp.message
        c.restart("n3")
        c.run_for(1_000)
        assert c.servers["n3"].store.ledger_end_index == c.servers[c.leader()].store.ledger_end_index
        c.crash("n3")
        acked(c, load(c, 20, "a"))
        resp = done(c, c.promote("n3"))               # it fell behind since
        assert resp.code == Code.FALL_BEHIND_TOO_MUCH and "20 entries behind" in resp.message, resp.message
        assert c.members() == (["n0", "n1", "n2"], ["n3"])
        # add_member keeps trying until its deadline, then says so
        resp = done(c, c.add_member("n3", timeout_ms=1_000), 5_000)
        assert resp.code == Code.FALL_BEHIND_TOO_MUCH
        c.restart("n3")
        assert done(c, c.add_member("n3")).code == Code.SUCCESS
        assert c.members() == (["n0", "n1", "n2", "n3"], [])
        c.check()


def test_the_configuration_entry_is_in_the_log_with_its_own_magic():
    with Cluster(n=3, seed=19) as c:
        settle(c)
        c.add_node("n3")
        resp = done(c, c.add_learner("n3"))
        entry = c.servers[c.leader()].get(resp.index)
        assert entry.magic == MAGIC_CONFIG_CHANGE
        config = Configuration.decode(entry.body)
        assert set(config.voters) == {"n0", "n1", "n2"} and set(config.learners) == {"n3"}


def test_the_configuration_survives_restarts_and_peers_given_later_are_ignored(caplog):
    with Cluster(n=3, seed=20, store="file") as c:
        settle(c)
        acked(c, load(c, 5, "a"))
        c.add_node("n3")
        assert done(c, c.add_member("n3")).code == Code.SUCCESS
        out = "n2" if c.leader() != "n2" else "n1"
        assert done(c, c.remove_member(out)).code == Code.SUCCESS
        want = c.members()
        for p in list(c.live()):
            c.crash(p)
        stale = ";".join(f"{p}-{c.address_of(p)}" for p in ("n0", "n1", "n2"))   # the first --peers
        config_for = c.config_for

        def first_peers(node_id):
            cfg = config_for(node_id)
            if node_id != "n3":
                cfg.peers, cfg.peer_map = stale, {}
                cfg.validate()
            return cfg

        c.config_for = first_peers
        for p in ("n0", "n1", "n2", "n3"):
            c.restart(p)
        settle(c, 5_000)
        assert c.members() == want
        assert any("differ from the group's configuration" in r.getMessage() for r in caplog.records)
        acked(c, load(c, 5, "b"))
        c.check()


def test_a_wiped_voter_replaced_as_the_docs_say():
    """The operator procedure: remove the lost machine, start the new one with --join, add it
    (learner, then promote)."""
    with Cluster(n=3, seed=21) as c:
        settle(c)
        futures = load(c, 30, "a")
        acked(c, futures)
        lost = next(p for p in ("n0", "n1", "n2") if p != c.leader())
        c.wipe(lost)
        assert done(c, c.remove_member(lost)).code == Code.SUCCESS
        c.add_node("n3")
        assert done(c, c.add_member("n3")).code == Code.SUCCESS
        survivors = sorted({"n0", "n1", "n2", "n3"} - {lost})
        assert c.members() == (survivors, [])
        futures += load(c, 10, "b")
        acked(c, futures)
        c.run_for(1_000)
        ends = {c.servers[p].store.ledger_end_index for p in survivors}
        assert len(ends) == 1
        c.check()


def test_a_wiped_node_restarted_votes_for_nobody_until_the_leader_taught_it():
    with Cluster(n=3, seed=22) as c:
        settle(c)
        acked(c, load(c, 10, "a"))
        victim = next(p for p in ("n0", "n1", "n2") if p != c.leader())
        c.wipe(victim)
        c.restart(victim)
        node = c.servers[victim].node
        assert node.member_state.configuration is None           # it knows no configuration
        c.run_until(lambda: node.member_state.configuration is not None, 5_000)
        # learnt from the leader; it is recovering until caught up, then a voter like any other
        assert c.run_until(lambda: not node.recovery.recovering, 5_000)
        assert node.store.ledger_end_index == c.servers[c.leader()].store.ledger_end_index
        c.check()


def test_a_joining_node_waits_to_be_added_and_stands_for_nothing():
    with Cluster(n=3, seed=23) as c:
        settle(c)
        acked(c, load(c, 5, "a"))
        c.add_node("n3")
        c.run_for(5_000)
        n3 = c.servers["n3"].node
        assert n3.member_state.configuration is None and n3.store.ledger_end_index == -1
        assert n3.elector.voting.round is None and n3.role is Role.CANDIDATE
        assert c.members() == (["n0", "n1", "n2"], [])
        c.check()


def test_the_commit_quorum_checker_catches_a_leader_counting_a_non_voter():
    """I11 (``Cluster.check_commit_quorum``) is what the swarm relies on: a leader that counted
    anyone but the voters of its configuration is caught at the commit."""
    from dledger.core.quorum import Majority
    with Cluster(n=3, seed=24) as c:
        leader = settle(c)
        acked(c, load(c, 3, "a"))
        c.add_node("n3")
        assert done(c, c.add_learner("n3")).code == Code.SUCCESS
        others = [p for p in ("n0", "n1", "n2") if p != leader]
        c.partition([leader, "n3"], others)                  # the voters are up, cut off
        member = c.servers[leader].node.member_state
        member.majority = Majority([leader, "n3"])          # as if the learner were a voter
        c.append(b"x")
        c.run_for(1_000)
        assert any(p.startswith("I11") for p in c.invariants.problems), c.invariants.problems


def test_a_change_in_force_when_appended_is_undone_when_its_entry_is_cut():
    """The leader's change never commits (it was cut off, the others elected a new leader): its
    configuration was in force from the append on, and is gone with the entry."""
    with Cluster(n=3, seed=25) as c:
        old = settle(c)
        acked(c, load(c, 3, "a"))
        others = [p for p in ("n0", "n1", "n2") if p != old]
        c.partition([old], others)
        c.add_node("n3")
        f = c.add_learner("n3", via=old)
        c.run_for(5)
        assert c.members(old) == (["n0", "n1", "n2"], ["n3"])          # in force at once
        assert c.run_until(lambda: c.leader() in others, 5_000)
        acked(c, load(c, 3, "b"))
        c.heal()
        assert c.run_until(lambda: c.servers[old].node.leader_id in others, 5_000)
        c.run_for(1_000)
        assert f.done() and (f.exception() is not None or f.result().code != Code.SUCCESS)
        assert c.members(old) == (["n0", "n1", "n2"], [])              # undone with its entry
        assert c.members(c.leader()) == (["n0", "n1", "n2"], [])
        c.check()


def test_a_removed_node_that_missed_its_removal_is_refused_and_told_and_stands_no_more(caplog):
    with Cluster(n=3, seed=26) as c:
        settle(c)
        c.add_node("n3")
        assert done(c, c.add_member("n3")).code == Code.SUCCESS
        gone = next(p for p in ("n0", "n1", "n2") if p != c.leader())
        c.crash(gone)                                   # down while it is removed: it never learns
        assert done(c, c.remove_member(gone)).code == Code.SUCCESS
        leader, term = c.leader(), c.servers[c.leader()].node.term
        acked(c, load(c, 5, "a"))
        c.restart(gone)
        node = c.servers[gone].node
        assert node.member_state.is_voter()            # its own (stale) log still says voter
        assert c.run_until(node.member_state.knows_removed, 5_000)
        asked: list = []
        c.network.drop_if = lambda env: (asked.append(env) if isinstance(env.msg, VoteRequest)
                                         and env.src == gone else None) and False
        c.run_for(5_000)
        assert asked == []                               # it stood no more
        assert any("it stands for election no more" in r.getMessage() for r in caplog.records)
        assert c.leader() == leader and c.servers[leader].node.term == term      # nobody disrupted
        assert c.members() == (sorted({"n0", "n1", "n2", "n3"} - {gone}), [])
        c.check()


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_a_learner_behind_retention_learns_its_configuration_from_the_install(tmp_path, kind):
    """The learner was down while the entry that added it, and everything up to far past it, went
    from every log (retention): its log starts after them, and the install that moves its start
    names the configuration in force there. The members' own records keep theirs across
    restarts too."""
    import time

    if kind == "file":
        cfg = dict(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=32 * 64,
                   file_reserved_hours=1, delete_when=";".join(str(h) for h in range(24)))
    else:
        cfg = dict(mapped_file_size_for_entry_data=4096)
    with Cluster(n=3, seed=27, store=kind, base_dir=tmp_path if kind == "file" else None, record_applies=False,
                 **cfg) as c:
        settle(c)
        c.add_node("n3")
        c.crash("n3")
        add = done(c, c.add_learner("n3"))
        assert add.code == Code.SUCCESS
        acked(c, [c.append(b"w%03d" % k + bytes(300)) for k in range(60)], 20_000)
        c.run_for(500)
        for node_id in c.live():
            st = c.servers[node_id].store
            st = getattr(st, "inner", st)
            if kind == "file":
                st.clean(time.time() + 30 * 86400)
            else:
                st.reset(st.committed_index - 5, st.get_entry_term(st.committed_index - 5))
            assert st.ledger_before_begin_index > add.index           # the entry is gone here
        c.restart("n3")
        n3 = c.servers["n3"]
        assert c.run_until(lambda: n3.store.ledger_end_index == c.servers[c.leader()].store.ledger_end_index, 10_000)
        assert getattr(n3.store, "inner", n3.store).ledger_before_begin_index > add.index   # never held it
        want = (["n0", "n1", "n2"], ["n3"])
        assert c.members("n3") == want
        assert done(c, c.add_member("n3")).code == Code.SUCCESS      # (a learner: promoted once caught up)
        want = (["n0", "n1", "n2", "n3"], [])
        if kind == "file":
            for node_id in list(c.live()):
                c.restart(node_id)
            settle(c, 5_000)
        for node_id in ("n0", "n1", "n2", "n3"):
            assert c.members(node_id) == want, node_id
        # (a restart of every node may cost an election or two: append as a client does, until one
        # is acknowledged)
        f = None
        for _ in range(20):
            f = c.append(b"after")
            if c.run_until(f.done, 2_000) and f.exception() is None and f.result().code == Code.SUCCESS:
                break
            settle(c, 5_000)
        assert f.result().code == Code.SUCCESS
        c.check()


def test_a_node_that_waits_says_why_it_knows_no_leader():
    with Cluster(n=3, seed=28) as c:
        settle(c)
        c.add_node("n3")
        c.run_for(1_000)
        n3 = c.servers["n3"].node
        why = n3.waiting.reason(n3.elector.voting.last_tally)
        assert "it joins the group and is not a member yet" in why and "dledger member add --id n3" in why
        assert done(c, c.add_learner("n3")).code == Code.SUCCESS
        assert c.run_until(lambda: n3.member_state.configuration is not None, 5_000)
        for p in ("n0", "n1", "n2"):
            c.crash(p)
        c.run_for(2_000)
        assert n3.member_state.leader_id is None
        why = n3.waiting.reason(n3.elector.voting.last_tally)
        assert "it is a learner of the configuration of entry" in why and "it stands for nothing" in why, why


def test_a_voter_that_holds_a_change_of_the_term_grants_no_vote_in_that_term():
    """Two changes in one term can leave no member common to a quorum of the configuration that
    elected the term's leader and one of today's: a voter holding a change made in the term
    votes for nobody in that term (swarm seed 20092 elected two leaders of term 1 so)."""
    from dledger.protocol import VoteResult
    with Cluster(n=3, seed=29) as c:
        leader = settle(c)
        c.add_node("n3")
        assert done(c, c.add_learner("n3")).code == Code.SUCCESS
        c.run_for(500)
        follower = "n3"                                           # it joined the term without voting
        other = next(p for p in ("n0", "n1", "n2") if p != leader)
        node = c.servers[follower].node
        member = node.member_state
        # as a member that joined the term by a heartbeat, without voting (n3 relearnt it with a
        # vote for no member, which refuses every vote anyway)
        node.store.persist_term(member.curr_term, None)
        assert member.configuration.made_in(member.curr_term) and member.curr_vote_for is None
        req = VoteRequest(group="sim", local_id=other, remote_id=follower, leader_id=other, term=member.curr_term,
                          ledger_end_index=member.ledger_end_index, ledger_end_term=member.ledger_end_term,
                          config_index=member.config_index)
        assert node.elector.voting.vote(req).vote_result in (VoteResult.REJECT_ALREADY_HAS_LEADER,
                                                             VoteResult.REJECT_ALREADY_VOTED)
        assert member.curr_vote_for is None                      # and it persisted no vote
        # nor again for a candidate it voted for earlier in the term (that candidate lost then; a
        # smaller configuration made since would count the same vote toward a quorum: seed 9000146)
        node.store.persist_term(member.curr_term, other)
        assert node.elector.voting.vote(req).vote_result != VoteResult.ACCEPT


def test_a_removed_node_with_the_only_up_to_date_log_leads_until_its_removal_commits(caplog):
    """The Raft dissertation's removed server: its newest configuration, not committed yet,
    leaves it out, but it holds the one log the old configuration's voters can elect; it stands,
    commits its removal and steps down, and the others go on."""
    import logging
    caplog.set_level(logging.INFO, logger="dledger.core.member_state")
    with Cluster(n=3, seed=30) as c:
        settle(c)
        c.add_node("n3")
        assert done(c, c.add_member("n3")).code == Code.SUCCESS
        leader = c.leader()
        removed = next(p for p in ("n0", "n1", "n2", "n3") if p != leader)
        rest = [p for p in ("n0", "n1", "n2", "n3") if p not in (leader, removed)]
        c.partition([leader, removed], rest)                # the removal reaches the removed node only
        f = c.remove_member(removed)
        assert c.run_until(lambda: c.members(removed)[0] == sorted(set(rest) | {leader}), 2_000)
        c.crash(leader)
        c.heal()
        assert c.run_until(lambda: c.leader() in rest, 20_000)
        assert c.members(c.leader()) == (sorted(set(rest) | {leader}), [])
        assert any(r.getMessage().startswith(f"{removed}: LEADER -> CANDIDATE") and "(removed from the group)"
                   in r.getMessage() for r in caplog.records)
        assert f.done()
        c.restart(leader)
        acked(c, load(c, 3, "after"))
        c.check()


@pytest.mark.parametrize("when", ["before the entry reaches anyone", "once the entry is on a follower",
                                  "right after it commits"])
def test_a_change_interrupted_by_the_leaders_crash(when):
    """The leader dies during a change: what every node ends with is either the configuration
    before or the one after, the same on all, and nothing acknowledged is lost."""
    with Cluster(n=3, seed=31) as c:
        old = settle(c)
        futures = load(c, 10, "a")
        acked(c, futures)
        c.add_node("n3")
        if when == "before the entry reaches anyone":
            c.partition([old], [p for p in c.ids if p != old])
        f = c.add_learner("n3", via=old)
        if when == "once the entry is on a follower":
            assert c.run_until(lambda: any(c.members(p)[1] == ["n3"] for p in c.ids if p not in (old, "n3")), 2_000)
        elif when == "right after it commits":
            assert c.run_until(f.done, 5_000) and f.result().code == Code.SUCCESS
        else:
            c.run_for(5)
        c.crash(old)
        c.heal()
        assert c.run_until(lambda: c.leader() not in (None, old), 10_000)
        c.restart(old)
        futures += load(c, 5, "b")
        acked(c, futures)
        c.run_for(1_000)
        views = {p: c.members(p) for p in ("n0", "n1", "n2")}
        assert len(set(map(str, views.values()))) == 1, views
        assert views[old] in ((["n0", "n1", "n2"], []), (["n0", "n1", "n2"], ["n3"]))
        if when == "right after it commits":
            assert views[old] == (["n0", "n1", "n2"], ["n3"])       # committed: it survives
        c.check()
