"""Diagnosable elections, in virtual time: what the log lines say.

- a node that knows no leader says why every 5 s (no more often), naming the members it has not
  heard from and the remedy; ``MetadataResponse.waiting`` carries the same reason;
- members whose ``--peers`` differ refuse each other (PEERS_MISMATCH), and both sides log the
  differing entries, once per peer per minute;
- a failover and a leadership transfer can be told from the INFO lines, in order.
"""

from __future__ import annotations

import logging
import re

import pytest

from dledger.core import Role
from dledger.core.waiting import WAITING_LOG_INTERVAL_MS
from dledger.protocol import DLedgerResponseCode as Code, MetadataRequest
from dledger.sim import Cluster


def lines(caplog, logger: str, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def story(caplog) -> list[str]:
    """Every INFO line of the election loggers, in order."""
    names = {"dledger.core.member_state", "dledger.core.vote", "dledger.core.leadership_transfer"}
    return [r.getMessage() for r in caplog.records if r.name in names and r.levelno == logging.INFO]


def test_two_of_three_new_members_say_every_5_s_that_they_wait_for_the_third_and_how_to_start(caplog):
    caplog.set_level(logging.INFO)
    with Cluster(n=3, seed=2) as c:
        c.crash("n2")                       # never started: two of three members of a new group
        c.run_for(3 * WAITING_LOG_INTERVAL_MS + 500)
        assert c.leader() is None
        warned = lines(caplog, "dledger.core.waiting", logging.WARNING)
        for node in ("n0", "n1"):
            mine = [w for w in warned if w.startswith(f"{node}: ")]
            assert len(mine) == 3, mine                 # at 5, 10 and 15 s: no more often
            for w in mine:
                assert re.match(rf"{node}: no leader for \d+\.\d s \(CANDIDATE in term 0\): its store is new", w)
                assert "not from n2 (127.0.0.1:20913)" in w            # who it waits for, and where
                assert "--bootstrap on every member" in w              # the remedy
        times = [r.created for r in caplog.records if r.name == "dledger.core.waiting"]
        assert len(times) == 6
        # the same reason, asked for (what ``dledger status`` shows)
        node = c.servers["n0"].node
        meta = node._metadata(MetadataRequest(group="sim", local_id="x", remote_id="n0"))
        assert meta.waiting.startswith("its store is new or wiped (FRESH)") and "n2" in meta.waiting
        c.restart("n2")
        assert c.run_until(lambda: c.leader() is not None, 5_000)
        node = c.servers["n0"].node
        assert node._metadata(MetadataRequest(group="sim", local_id="x", remote_id="n0")).waiting == ""
        c.check()


def test_a_waiting_node_names_the_members_that_do_not_answer_its_votes(caplog):
    caplog.set_level(logging.INFO)
    with Cluster(n=3, seed=3) as c:
        assert c.run_until(lambda: c.leader() is not None and all(c.servers[i].node.leader_id for i in c.ids), 2_000)
        lead = c.leader()
        alone = next(i for i in c.ids if i != lead)
        c.partition([alone], [i for i in c.ids if i != alone])
        c.run_for(2 * WAITING_LOG_INTERVAL_MS + 1_000)
        mine = [w for w in lines(caplog, "dledger.core.waiting", logging.WARNING) if w.startswith(f"{alone}: ")]
        assert 1 <= len(mine) <= 2
        others = sorted(set(c.ids) - {alone})
        assert f"; no answer from {', '.join(others)}" in mine[-1]
        assert "; check that " in mine[-1] and "run at those addresses" in mine[-1]
        # the isolated node's lost rounds are logged once per outcome and term, not per round
        lost = [m for m in lines(caplog, "dledger.core.vote") if m.startswith(f"{alone}: election in term")]
        assert len(lost) == len(set(lost))
        c.heal()
        assert c.run_until(lambda: c.servers[alone].role is Role.FOLLOWER, 5_000)
        c.check()


def test_members_whose_peers_differ_refuse_each_other_and_both_name_the_difference(caplog):
    caplog.set_level(logging.INFO)
    with Cluster(n=3, seed=4) as c:
        c.crash("n2")
        cfg_for = c.config_for

        def typo(node_id):
            cfg = cfg_for(node_id)
            if node_id == "n2":              # a misspelt id in n2's --peers: n3 where n1 is meant
                cfg.peers = c.peers.replace("n1-127.0.0.1:20912", "n3-127.0.0.1:20912")
                # (started as the bootstrap of a new group: its --peers make its configuration; a
                # node without one learns its configuration from the leader instead)
                cfg.bootstrap = True
                cfg.peer_map = {}
                cfg.validate()
            return cfg

        c.config_for = typo
        c.restart("n2")
        c.run_for(70_000)
        errors = lines(caplog, "dledger.core.peers_check", logging.ERROR)
        lead = c.leader()
        assert lead in ("n0", "n1")                  # n0 and n1 agree and elect
        addr = "127.0.0.1:20912"

        def about(node: str, peer: str) -> list[str]:
            return [e for e in errors if e.startswith((f"{node}: refusing {peer}'s requests",
                                                       f"{node}: {peer} refuses this node's requests"))]

        # both sides of the link say it (n2 refuses the leader's heartbeats, the leader hears of
        # it in the answers), naming the differing entries, once per peer per minute (70 s: 2);
        # n2 waits for n3, which does not exist, so it asks no one for votes
        for node, peer, entry in (("n2", lead, f"n3 ({addr}) is a member here but not at {lead}"),
                                  ("n2", lead, f"n1 ({addr}) is not a member here but is at {lead}"),
                                  (lead, "n2", f"n3 ({addr}) is not a member here but is at n2"),
                                  (lead, "n2", f"n1 ({addr}) is a member here but not at n2")):
            found = about(node, peer)
            assert found and all(entry in line for line in found), (node, peer, found)
            assert len(found) <= 2, found
        assert len(about("n2", lead)) == 2          # the leader's heartbeats all along: at 0 and 60 s
        # n2 is refused and never follows, and says why
        assert c.servers["n2"].role is Role.CANDIDATE
        waiting = c.servers["n2"].node.waiting.reason(c.servers["n2"].node.elector.voting.last_tally)
        assert f"has other peers (n1 ({addr}) is not a member here but is at n" in waiting
        assert Code.PEERS_MISMATCH == 430


def test_addresses_may_differ_between_members(caplog):
    """Only the member ids must agree: a member may reach another through a proxy, a NAT or
    another name, so that n2's --peers gives n1 another address than n0's is no mismatch."""
    caplog.set_level(logging.INFO)
    with Cluster(n=3, seed=4) as c:
        c.crash("n2")
        cfg_for = c.config_for

        def other_address(node_id):
            cfg = cfg_for(node_id)
            if node_id == "n2":
                cfg.peers = c.peers.replace("n1-127.0.0.1:20912", "n1-10.9.8.7:30912")
                cfg.peer_map = {}
                cfg.validate()
            return cfg

        c.config_for = other_address
        c.restart("n2")
        assert c.run_until(lambda: c.leader() is not None and c.servers["n2"].role is Role.FOLLOWER, 5_000)
        assert lines(caplog, "dledger.core.peers_check", logging.ERROR) == []
        f = c.append(b"x")
        assert c.run_until(f.done, 2_000) and f.result().ok
        c.check()


def test_a_failover_tells_its_story_in_order(caplog):
    with Cluster(n=3, seed=5) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        old = c.leader()
        term = c.servers[old].node.term
        caplog.set_level(logging.INFO)
        caplog.clear()
        c.crash(old)
        assert c.run_until(lambda: c.leader() not in (None, old), 2_000)
        new = c.leader()
        c.restart(old)
        assert c.run_until(lambda: c.servers[old].role is Role.FOLLOWER, 2_000)
        told = story(caplog)
        new_term = c.servers[new].node.term

        def first(pattern: str) -> int:
            found = [k for k, line in enumerate(told) if re.search(pattern, line)]
            assert found, f"no line matches {pattern!r} in:\n" + "\n".join(told)
            return found[0]

        timeout = first(rf"^n\d: FOLLOWER -> CANDIDATE in term {term} \(election timeout\): nothing heard from "
                        rf"{old} for \d+ ms$")
        started = first(rf"^{new}: election started in term {new_term} ")
        won = first(rf"^{new}: CANDIDATE -> LEADER in term {new_term} \(vote won\): for ({new}, n\d|n\d, {new}).*"
                    rf"; the leader was {old} in term {term}$")
        follows = first(rf"^{old}: CANDIDATE -> FOLLOWER in term {new_term} leader={new} \(leader heard\): "
                        rf"a heartbeat of {new}$")
        assert timeout < started < won < follows
        c.check()


def test_a_leadership_transfer_is_asked_started_and_done_in_the_log(caplog):
    with Cluster(n=3, seed=6) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        target = next(i for i in c.ids if i != lead)
        f = c.append(b"x")
        assert c.run_until(f.done, 1_000)
        caplog.set_level(logging.INFO)
        caplog.clear()
        t = c.servers[lead].transfer_leadership(target)
        assert c.run_until(t.done, 5_000) and t.result().code == Code.SUCCESS
        told = story(caplog)
        expected = [rf"^{lead}: leadership transfer to {target} started in term \d+: it takes over once its log "
                    rf"reaches index \d+",
                    rf"^{target}: asked by {lead} to take leadership in term \d+",
                    rf"^{target}: caught up to index \d+: standing in term \d+ to take leadership from {lead}$",
                    rf"^{target}: FOLLOWER -> CANDIDATE in term \d+ \(taking leadership\): a leadership transfer "
                    rf"from {lead}$",
                    rf"^{target}: CANDIDATE -> LEADER in term \d+ \(vote won\)",
                    rf"^{target}: took leadership in term \d+$",
                    rf"^{lead}: leadership transfer to {target} done: it leads term \d+$"]
        at = -1
        for pattern in expected:
            found = [k for k, line in enumerate(told) if re.search(pattern, line) and k > at]
            assert found, f"no line after {at} matches {pattern!r} in:\n" + "\n".join(told)
            at = found[0]
        c.check()


@pytest.mark.parametrize("silent, recovering, want", [
    (["n1"], [], "; check that n1 (h:1) runs at that address"),
    (["n1", "n2"], [], "; check that n1 (h:1), n2 (h:2) run at those addresses"),
    ([], ["n2"], "; n2 is recovering (its store may have lost what it acknowledged): it votes once every member "
                 "answered it or a leader caught it up; "),
    ([], ["n1", "n2"], "; n1, n2 are recovering (their stores may have lost what they acknowledged): they vote once "
                       "every member answered them or a leader caught them up; "),
])
def test_a_lost_round_names_one_peer_in_the_singular_and_several_in_the_plural(silent, recovering, want):
    from types import SimpleNamespace

    from dledger.core.quorum import Majority
    from dledger.core.vote import VoteTally
    from dledger.core.waiting import Waiting
    from dledger.protocol import VoteResponse, VoteResult

    tally = VoteTally(1, unanimous=False)
    tally.add("n0", VoteResponse(term=1, vote_result=VoteResult.ACCEPT))
    for peer in ("n1", "n2"):
        if peer not in silent:
            tally.add(peer, VoteResponse(term=1, vote_result=VoteResult.REJECT_ALREADY_VOTED,
                                         recovering=peer in recovering))
    tally.results.update({p: "no answer" for p in silent})
    member = SimpleNamespace(majority=Majority(["n0", "n1", "n2"]), self_id="n0",
                             addresses={"n0": "h:0", "n1": "h:1", "n2": "h:2"})
    waiting = Waiting(member, recovery=None, peers_check=None, config=None, now_ms=0)
    assert want in waiting._round(tally)
