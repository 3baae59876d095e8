"""``python -m dledger.sim``: run seeded swarm simulations; print the failing seed's command.

    python -m dledger.sim --seed 17 --nodes 5          # one seed, full report
    python -m dledger.sim --seeds 500 --nodes 3        # a sweep of seeds 0..499
    python -m dledger.sim --seeds 500 --no-codec       # envelopes by reference: faster, same runs
"""

from __future__ import annotations

import argparse
import sys
import time

from dledger.sim.checkers import InvariantViolation
from dledger.sim.faults import SwarmOptions, run_swarm


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dledger.sim", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None, help="run this one seed")
    p.add_argument("--seeds", type=int, default=100, help="run seeds 0..N-1 (when --seed is not given)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--store", choices=("memory", "file"), default="memory")
    p.add_argument("--duration-ms", type=int, default=5_000)
    p.add_argument("--no-codec", action="store_true",
                   help="pass envelopes by reference instead of through the wire codec (faster)")
    args = p.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first_seed, args.first_seed + args.seeds)
    failed = 0
    t0 = time.perf_counter()
    virtual = 0
    for seed in seeds:
        opts = SwarmOptions(seed=seed, nodes=args.nodes, store=args.store, duration_ms=args.duration_ms,
                            codec=not args.no_codec)
        try:
            c = run_swarm(opts)
            virtual += c.now_ms
            counts = c.history.counts()
            if args.seed is not None:
                print(f"seed {seed}: ok at {c.now_ms} ms virtual; appends {dict(counts)}; "
                      f"committed {len(c.committed_log())} entries")
            c.close()
        except InvariantViolation as exc:
            failed += 1
            print(f"FAILED seed {seed}:\n{exc}", file=sys.stderr)
    wall = time.perf_counter() - t0
    n = len(seeds)
    print(f"{n - failed}/{n} seeds passed ({args.nodes} nodes) in {wall:.1f} s wall, "
          f"{virtual / 1000:.0f} s virtual ({virtual / 1000 / max(wall, 1e-9):.0f}x)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
