"""The swarm itself: options drawn from the seed within the documented ranges, the same seed
gives the same run byte for byte, every seed mixes appends with reads of every mode and
key-value operations, a failure names its seed, options and reproduction, and the swarm
catches a real bug planted in the core (stale lease reads)."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from dledger.protocol import ReadMode
from dledger.sim import SwarmFailure, SwarmOptions, run_swarm
from dledger.sim.__main__ import main
from dledger.sim.swarm_options import CLIENT_OPS, NEMESIS_ACTIONS


@settings(max_examples=200)
@given(st.integers(0, 2**32), st.sampled_from([3, 5]), st.sampled_from(["page_cache", "fsync"]),
       st.sampled_from(["memory", "file"]))
def test_options_are_drawn_from_the_seed_within_the_ranges(seed, nodes, durability, store):
    o = SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store=store)
    assert o == SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store=store)
    assert 0 <= o.loss <= 0.3 and 0 <= o.duplicate <= 0.5 and 1 <= o.min_delay_ms <= o.max_delay_ms <= 50
    assert 0 <= o.replay <= 0.5 and 0 <= o.corrupt <= 0.1 and 0 <= o.clog <= 0.3 and 0 <= o.pause <= 0.3
    assert 0 <= o.clock_drift <= 0.05                  # within the config's max_clock_drift
    storage = (o.bit_flip, o.misdirect, o.lost_write, o.enospc, o.eio, o.slow_sync_ms, o.crash_inside)
    if store == "memory":
        assert set(storage) == {0}                     # the storage faults need a file store
    else:
        assert 0 <= o.bit_flip <= 0.5 and 0 <= o.misdirect <= 0.01 and 0 <= o.lost_write <= 0.01
        assert 0 <= o.enospc <= 0.3 and 0 <= o.eio <= 0.2 and o.slow_sync_ms in (0, 1, 5)
        assert o.crash_inside in (0.0, 0.3, 1.0)
    # drawn after every other field: without them, every other field keeps its value
    off = SwarmOptions.from_seed(seed, nodes=nodes, durability=durability, store=store, storage_faults=False)
    assert set((off.bit_flip, off.misdirect, off.lost_write, off.enospc, off.eio, off.slow_sync_ms,
                off.crash_inside)) == {0}
    assert dataclasses.replace(o, bit_flip=0.0, misdirect=0.0, lost_write=0.0, enospc=0.0, eio=0.0, slow_sync_ms=0,
                               crash_inside=0.0, storage_faults=False) == off
    assert 2 <= o.clients <= 5 and 1 <= o.keys <= 4 and len(o.mix) == len(CLIENT_OPS)
    assert len(o.nemesis) == len(NEMESIS_ACTIONS) and sum(o.nemesis) > 0
    power = o.nemesis_weights()["power_loss"]
    if store == "memory":
        assert power == 0 and o.power_victims == ()
    elif power and durability == "page_cache":
        assert 1 <= len(o.power_victims) <= (nodes - 1) // 2          # only ever a minority
    elif power:
        assert len(o.power_victims) == nodes


@pytest.mark.parametrize("seed,store,durability", [(42, "memory", "page_cache"), (1002, "file", "page_cache"),
                                                    (2028, "file", "fsync"), (2046, "file", "fsync")])
def test_the_same_seed_gives_the_same_run_byte_for_byte(seed, store, durability, tmp_path):
    """(2028 and 2046 draw most storage faults, crashes inside a write among them.)"""
    runs = iter(["a", "b"])

    def run():
        base = tmp_path / next(runs) if store == "file" else None
        r = run_swarm(SwarmOptions.from_seed(seed, nodes=3, store=store, durability=durability), base_dir=base)
        ops = [(o.kind, o.body, o.node, o.invoke_ms, o.complete_ms, o.code, o.index, o.term, o.pos, o.mode)
               for o in r.history.ops]
        out = (ops, r.committed_log(), r.scheduler.events_run, r.kv.ops(), r.nemesis, r.now_ms, r.disk,
               [(t, n) for t, n, _why in r.cluster.halts], [(t, n) for t, n, _why in r.cluster.refusals])
        r.close()
        return out

    assert run() == run()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_seed_mixes_appends_with_reads_of_every_mode_and_key_value_operations(seed):
    opts = SwarmOptions.from_seed(seed, nodes=3)
    r = run_swarm(opts)
    reads = {op.mode for op in r.history.ops if op.kind == "read"}
    kinds = {op.kind for op in r.history.ops}
    kv_kinds = {op.input[0] for op in r.kv.ops()}
    r.close()
    assert reads == {int(m) for m in ReadMode}
    assert {"append", "write", "read"} <= kinds
    assert {"put", "get"} <= kv_kinds


def test_a_file_store_seed_with_power_loss_runs_and_checks(tmp_path):
    seed = next(s for s in range(100) if SwarmOptions.from_seed(s, nodes=3, store="file").nemesis[-1] >= 2)
    r = run_swarm(SwarmOptions.from_seed(seed, nodes=3, store="file"), base_dir=tmp_path)
    assert r.history.counts()["ok"] > 0
    r.close()


def test_a_failure_names_the_seed_the_options_and_the_reproduction(monkeypatch):
    from dledger.sim import cluster

    def broken_check(self):
        raise cluster.InvariantViolation("I4 committed prefixes differ (planted)")

    monkeypatch.setattr(cluster.Cluster, "check", broken_check)
    opts = SwarmOptions.from_seed(7, nodes=5, durability="fsync")
    with pytest.raises(SwarmFailure) as exc:
        run_swarm(opts)
    text = str(exc.value)
    assert "seed 7 failed" in text and "planted" in text
    assert f"  loss = {opts.loss!r}" in text and "  power_victims = " in text
    assert "reproduce: python -m dledger.sim swarm --seed 7 --nodes 5 --durability fsync --store memory" in text


def test_the_command_line_runs_seeds_and_reports_a_failure_with_its_reproduction(monkeypatch, capsys):
    assert main(["swarm", "--seeds", "2", "--first-seed", "5", "--quiet"]) == 0
    assert "2/2 seeds passed" in capsys.readouterr().out
    assert main(["--seed", "5"]) == 0                         # the old form still works
    assert "seed 5: ok" in capsys.readouterr().out
    from dledger.sim import cluster
    monkeypatch.setattr(cluster.Cluster, "check", lambda self: (_ for _ in ()).throw(
        cluster.InvariantViolation("planted")))
    assert main(["swarm", "--seed", "3", "--nodes", "5"]) == 1
    out = capsys.readouterr()
    assert "reproduce: python -m dledger.sim swarm --seed 3 --nodes 5" in out.err
    assert "failed seeds: 3" in out.out


def test_help_shows_examples(capsys):
    with pytest.raises(SystemExit):
        main(["swarm", "--help"])
    assert "python -m dledger.sim swarm --seeds 1000" in capsys.readouterr().out


def test_the_swarm_catches_a_follower_serving_linearizable_reads(monkeypatch):
    """A planted bug: followers answer READ_INDEX_READ with their own commit index instead of
    NOT_LEADER. Seed 3 (3 nodes) reads from a cut-off follower and the read checker calls it stale
    (13 of seeds 0-59 catch it)."""
    from dledger.core import node as node_module
    real_read = node_module.Node.read

    def read(self, now_ms, token, mode):
        if ReadMode(mode) is ReadMode.READ_INDEX_READ and self.member_state.role is not node_module.Role.LEADER:
            self.complete_read(token, 200, self.member_state.committed_index)
            return
        real_read(self, now_ms, token, mode)

    monkeypatch.setattr(node_module.Node, "read", read)
    with pytest.raises(SwarmFailure, match="stale read"):
        run_swarm(SwarmOptions.from_seed(3, nodes=3))


def test_the_swarm_catches_a_state_machine_that_loses_acknowledged_puts(monkeypatch):
    """A planted bug in the key-value machine (every put whose value is a multiple of 3 is
    acknowledged but not applied): the key-value history of seed 1 is not linearizable."""
    from dledger.sim import swarm
    from dledger.sim.kv import KVStateMachine

    class LosesPuts(KVStateMachine):
        def apply_command(self, cmd):
            if cmd[0] == "put" and int(cmd[2]) % 3 == 0:
                return True
            return super().apply_command(cmd)

    monkeypatch.setattr(swarm, "KVStateMachine", LosesPuts)
    with pytest.raises(SwarmFailure, match="key-value history not linearizable"):
        run_swarm(SwarmOptions.from_seed(1, nodes=3))


@pytest.mark.parametrize("safety", [None, 20_000])
def test_the_reproduction_line_draws_the_same_options(safety):
    """The printed command builds the very options of the run (a drawn safety phase is left out
    of it: naming it would draw the fields after it differently; seed 7300009)."""
    from dledger.sim.__main__ import parser
    for seed in (7300009, 11, 12):
        opts = SwarmOptions.from_seed(seed, nodes=5, durability="page_cache", store="file", safety_ms=safety,
                                      snapshots=True)
        args = parser().parse_args(opts.reproduce().split()[4:])
        again = SwarmOptions.from_seed(args.seed, nodes=args.nodes, durability=args.durability, store=args.store,
                                       codec=not args.no_codec, safety_ms=args.safety_ms,
                                       storage_faults=not args.no_storage_faults, snapshots=args.snapshots)
        assert again == opts


def test_without_the_codec_no_seed_draws_frame_corruption_and_the_other_fields_stay():
    """``--no-codec`` once crashed every seed that drew corruption (it flips bits of encoded
    frames): 20 of seeds 7100000-7100039."""
    for seed in range(7_100_000, 7_100_040):
        with_codec = SwarmOptions.from_seed(seed)
        without = SwarmOptions.from_seed(seed, codec=False)
        assert without.corrupt == 0.0
        assert dataclasses.replace(without, codec=True, corrupt=with_codec.corrupt) == with_codec
    drew = next(s for s in range(7_100_000, 7_100_040) if SwarmOptions.from_seed(s).corrupt > 0)
    run_swarm(SwarmOptions.from_seed(drew, codec=False))         # runs and checks, no crash
