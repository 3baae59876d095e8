"""A node whose disk fails halts at once, as a crashed process, and a restart brings it back.

When the store fails (a failed msync: the simulated disk's ``PowerLoss.fail_syncs``), the
server must stop acknowledging at once: nothing more leaves the node (not even what the crank
that found the failure had decided), every pending and later operation ends with DISK_ERROR
(reads too), and the cluster goes on without it; a restart (the store reopened and recovered)
is the only way back, never a retried msync. A full disk is not a failure: appends get
DISK_FULL, the node keeps leading and serving reads.
"""

import pytest

from dledger.errors import DISK_ERROR, DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, ReadMode
from dledger.sim import Cluster


def _spy_sends(c, node):
    """Every envelope ``node`` sends, with whether its store had failed by then."""
    sent = []
    endpoint = c.network.endpoints[node]
    real = endpoint.send

    def send(env):
        sent.append((c.servers[node].store.failed is not None, env))
        real(env)

    endpoint.send = send
    return sent


@pytest.mark.parametrize("durability", ["fsync", "page_cache"])
@pytest.mark.parametrize("victim_role", ["leader", "follower"])
def test_a_node_whose_store_fails_sends_nothing_more_and_fails_its_pending_calls(tmp_path, durability,
                                                                                  victim_role):
    with Cluster(n=3, seed=31, store="file", base_dir=tmp_path, durability=durability) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        first = [c.append(b"before-%d" % i) for i in range(5)]
        assert c.run_until(lambda: all(f.done() for f in first), 2_000)
        lead = c.leader()
        victim = lead if victim_role == "leader" else next(i for i in c.ids if i != lead)
        server = c.servers[victim]
        sent = _spy_sends(c, victim)
        c.power[victim].fail_syncs(None)                       # the disk is gone for good
        during = [c.append(b"during-%d" % i, via=lead) for i in range(5)]
        answers = []                                           # (store failed by then?, code)
        for f in during:
            f.add_done_callback(lambda f: answers.append((server.store.failed is not None, f.result().code)))
        assert c.run_until(lambda: server.halted is not None, 2_000)
        assert "msync" in server.halted and server.store.failed in server.halted
        assert not any(after for after, _env in sent)          # nothing left it once its store failed
        assert [h[1] for h in c.halts] == [victim] and victim in c.crashed
        if victim_role == "leader":                            # no acknowledgement once it failed:
            assert c.run_until(lambda: all(f.done() for f in during), 1_000)
            assert all(code == Code.DISK_ERROR for failed, code in answers if failed)
            if durability == "fsync":                          # (page_cache acknowledges from the
                assert {code for _f, code in answers} == {Code.DISK_ERROR}   # page cache before its flush)
        late = server.append(b"late")                          # later calls: DISK_ERROR at once
        read = server.read(ReadMode.UNSAFE_READ)
        assert late.done() and late.result().code == Code.DISK_ERROR
        assert read.done() and read.result().code == Code.DISK_ERROR
        with pytest.raises(DLedgerError) as exc:
            server.get(0)
        assert exc.value.code == DISK_ERROR
        assert c.run_until(lambda: c.leader() not in (None, victim), 3_000)
        more = c.append(b"without it")                         # the majority goes on
        assert c.run_until(more.done, 2_000) and more.result().ok
        c.power[victim].heal_syncs()
        c.restart(victim)                                      # the way back: reopen and recover
        assert c.servers[victim].halted is None and c.servers[victim].store.failed is None
        final = c.append(b"final")
        assert c.run_until(final.done, 3_000) and final.result().ok
        index = final.result().index
        assert c.run_until(lambda: all(c.servers[i].node.applied_index >= index for i in c.ids), 3_000)
        c.check()


def test_a_failed_store_is_never_flushed_again_after_the_halt(tmp_path):
    """No retry into a false success: after the halt no msync reaches the disk from that store."""
    with Cluster(n=3, seed=32, store="file", base_dir=tmp_path, durability="page_cache") as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        victim = next(i for i in c.ids if i != lead)
        c.power[victim].fail_syncs(1)                          # one EIO; the next msync would succeed
        for i in range(5):
            c.append(b"x%d" % i)
        assert c.run_until(lambda: c.servers[victim].halted is not None, 2_000)
        ops = c.power[victim].ops
        c.run_for(2_000)
        assert c.power[victim].ops == ops                      # the halted node touches its disk no more
        c.check()


def test_a_node_whose_disk_is_full_grants_no_vote_it_cannot_persist_and_keeps_serving(tmp_path):
    """The term file write of a vote finds the disk full (a real ENOSPC through the simulated
    disk): the vote is not granted (no ACCEPT leaves the node), the node does not halt, and
    once space is back the election completes."""
    from dledger.protocol import VoteResponse, VoteResult

    with Cluster(n=3, seed=33, store="file", base_dir=tmp_path) as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        lead = c.leader()
        full, other = [i for i in c.ids if i != lead]
        sent = _spy_sends(c, full)
        c.power[full].no_space = True
        c.partition([lead], [full, other])                     # the other two must elect one of them
        c.run_for(3_000)
        votes = [env.msg for _failed, env in sent if isinstance(env.msg, VoteResponse)]
        assert votes and all(v.vote_result != VoteResult.ACCEPT for v in votes)
        assert c.leader() in (None, lead) and c.servers[full].halted is None
        assert c.servers[full].store.failed is None            # a full disk is not a failed disk
        c.power[full].no_space = False
        assert c.run_until(lambda: c.leader() in (full, other), 3_000)
        c.heal()
        f = c.append(b"after")
        assert c.run_until(f.done, 2_000) and f.result().ok
        c.check()


@pytest.mark.parametrize("power", [False, True])
def test_a_node_armed_to_die_inside_a_write_dies_there_and_recovers(tmp_path, power):
    """``crash_inside``: the node dies at its n-th next mapping write or msync (inside an
    append or a flush), the cluster takes it down there (a crash, or a power cut), and after a
    restart every acknowledged append is still in the agreed log."""
    with Cluster(n=3, seed=34, store="file", base_dir=tmp_path, durability="fsync") as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        victim = c.leader()
        c.crash_inside(victim, 3, power=power, torn=True)
        futures = [c.append(b"x%d" % i, via=victim) for i in range(5)]
        assert c.run_until(lambda: victim in c.crashed, 2_000)
        assert not c.power[victim].armed
        c.restart(victim)
        assert c.run_until(lambda: c.leader() is not None, 3_000)
        final = c.append(b"final")
        assert c.run_until(final.done, 3_000) and final.result().ok
        assert all(f.done() for f in futures)
        c.check()                                              # acknowledged appends all kept


def test_a_node_whose_repair_rewrite_fails_its_msync_halts(tmp_path):
    """Found by the swarm (seed 91046, 3 nodes, fsync, file stores, ``--safety-ms 20000``): the
    msync of a repair's rewrite (a damaged record rewritten from a peer's copy) raised a raw
    ``OSError`` out of the store, through the handler of the peer's answer: the simulation
    crashed, and a real node would have gone on with its store neither failed nor halted.
    Every write path of the store now goes through one gate (``store_io.writes_to_disk``):
    the store fails, and the node halts like after any failed msync."""
    from helpers.store_files import flip_bit, record_location

    with Cluster(n=3, seed=35, store="file", base_dir=tmp_path, durability="fsync") as c:
        assert c.run_until(lambda: c.leader() is not None, 2_000)
        done = [c.append(b"entry-%02d" % i * 4) for i in range(8)]
        assert c.run_until(lambda: all(f.done() and f.result().ok for f in done), 3_000)
        end = done[-1].result().index
        assert c.run_until(lambda: all(c.servers[i].store.ledger_end_index == end for i in c.ids), 2_000)
        victim = next(i for i in c.ids if i != c.leader())
        cfg = c.config_for(victim)
        loc = record_location(cfg.default_path, 3, cfg.mapped_file_size_for_entry_index,
                              cfg.mapped_file_size_for_entry_data)
        c.crash(victim)
        flip_bit(loc.path, loc.offset + loc.size - 2, 3)       # damage at rest in entry 3's body
        c.restart(victim)
        server = c.servers[victim]
        with pytest.raises(DLedgerError):
            server.store.get(3)                                # refused until repaired
        c.power[victim].fail_syncs(None)                       # the rewrite's msync will fail
        assert c.run_until(lambda: server.halted is not None, 5_000)
        assert "repair failed" in server.halted and "msync" in server.halted
        assert server.store.failed in server.halted
        assert [h[1] for h in c.halts] == [victim] and victim in c.crashed
        more = c.append(b"without it")                         # the majority goes on
        assert c.run_until(more.done, 3_000) and more.result().ok
        c.power[victim].heal_syncs()
        c.restart(victim)                                      # reopened: repaired from a peer
        final = c.append(b"final")
        assert c.run_until(final.done, 3_000) and final.result().ok
        index = final.result().index
        assert c.run_until(lambda: all(c.servers[i].node.applied_index >= index for i in c.ids)
                           and not c.servers[victim].store.damaged(), 5_000)
        assert c.servers[victim].store.get(3).body == b"entry-03" * 4
        c.check()
