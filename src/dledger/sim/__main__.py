"""``python -m dledger.sim swarm``: run seeded swarm simulations; a failure prints its seed, its
drawn options and the one-line command that reproduces it.

examples:
  python -m dledger.sim swarm --seed 17 --nodes 5                 # one seed, with a summary
  python -m dledger.sim swarm --seeds 1000                        # seeds 0..999, 3 nodes
  python -m dledger.sim swarm --seeds 500 --first-seed 10000 --nodes 5 --durability fsync
  python -m dledger.sim swarm --seeds 50 --store file             # real store directories, power loss
                                                                  # and the other storage faults
  python -m dledger.sim swarm --seeds 1000 --no-codec             # envelopes by reference: faster, no frame corruption
  python -m dledger.sim swarm --seeds 200 --store file --snapshots  # snapshots, trimmed logs, installs
  python -m dledger.sim swarm --seeds 500 --membership           # members added, removed, replaced
  python -m dledger.sim --seed 17                                 # the same as "swarm --seed 17"
  python -m dledger.sim soak                                      # the wide sweep on every core (soak --help)
"""

from __future__ import annotations

import argparse
import sys
import time

from dledger.sim.swarm import SwarmFailure, run_swarm
from dledger.sim.swarm_options import SwarmOptions


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dledger.sim swarm", description=__doc__.splitlines()[0],
                                epilog=__doc__.split("examples:")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None, help="run this one seed and print a summary")
    p.add_argument("--seeds", type=int, default=100, help="run N seeds from --first-seed (default 100)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    p.add_argument("--durability", choices=("page_cache", "fsync"), default="page_cache")
    p.add_argument("--store", choices=("memory", "file"), default="memory",
                   help="file: real store directories (power loss is drawn only there)")
    p.add_argument("--safety-ms", "--duration-ms", dest="safety_ms", type=int, default=None,
                   help="length of the safety phase (default: drawn from the seed)")
    p.add_argument("--no-codec", action="store_true",
                   help="pass envelopes by reference instead of through the wire codec (faster; the same runs, but no frame corruption, which flips bits of encoded frames)")
    p.add_argument("--no-storage-faults", action="store_true",
                   help="file stores: draw no storage fault beyond crash and power loss")
    p.add_argument("--snapshots", action="store_true",
                   help="file stores: the key-value machine takes snapshots, logs are trimmed behind them, "
                        "followers catch up by installs; snapshot faults strike too")
    p.add_argument("--membership", action="store_true",
                   help="the nemesis also changes the group's members: adds (learner, then voter), removes "
                        "(the leader too), wipes a disk, replaces a lost machine")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "soak":
        from dledger.sim.soak import main as soak_main
        return soak_main(argv[1:])
    if argv and argv[0] == "swarm":
        argv = argv[1:]
    args = parser().parse_args(argv)
    if args.snapshots and args.store != "file":
        parser().error("--snapshots needs --store file (a memory store keeps no snapshots)")
    seeds = [args.seed] if args.seed is not None else list(range(args.first_seed, args.first_seed + args.seeds))
    failed: list[int] = []
    unknown = 0
    t0 = time.perf_counter()
    virtual = 0
    for k, seed in enumerate(seeds):
        opts = SwarmOptions.from_seed(seed, nodes=args.nodes, durability=args.durability, store=args.store,
                                      codec=not args.no_codec, safety_ms=args.safety_ms,
                                      storage_faults=not args.no_storage_faults, snapshots=args.snapshots,
                                      membership=args.membership)
        try:
            r = run_swarm(opts)
        except SwarmFailure as exc:
            failed.append(seed)
            print(f"\nFAILED {exc}", file=sys.stderr, flush=True)
        else:
            virtual += r.now_ms
            unknown += r.unknown
            if args.seed is not None:
                c = r.cluster
                print(f"seed {seed}: ok at {r.now_ms} ms virtual; appends {dict(c.history.counts())}; "
                      f"reads {dict(sorted(c.history.read_counts().items()))}; "
                      f"key-value ops {len(r.kv.ops())}: {r.verdict.describe()}; "
                      f"nemesis {r.nemesis}; committed {len(c.committed_log())} entries")
                if opts.snapshots:
                    print(f"snapshots {r.snapshots}")
                if opts.membership:
                    print(f"membership changes {r.membership}; final members {r.members}")
                if opts.store == "file":
                    print(f"storage faults {r.disk}; halts (failed store) {[(t, n) for t, n, _r in c.halts]}; "
                          f"refused to open {[(t, n) for t, n, _r in c.refusals]}")
                print(f"options:\n{opts.describe()}")
            r.close()
        if not args.quiet and args.seed is None:
            wall = time.perf_counter() - t0
            print(f"\r[{k + 1}/{len(seeds)}] {len(failed)} failed, {60 * (k + 1) / max(wall, 1e-9):.0f} seeds/min",
                  end="", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    n = len(seeds)
    if not args.quiet and args.seed is None:
        print(file=sys.stderr)
    print(f"{n - len(failed)}/{n} seeds passed ({args.nodes} nodes, {args.store} stores, {args.durability}) in "
          f"{wall:.1f} s wall: {60 * n / max(wall, 1e-9):.0f} seeds/min, {virtual / 1000:.0f} s virtual; "
          f"{unknown} key-value histories too large to decide (unknown)")
    if failed:
        print("failed seeds: " + " ".join(map(str, failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
