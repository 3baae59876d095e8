"""``python -m dledger.sim soak``: the wide sweep, on every core of the machine.

It runs the swarm (``run_swarm``) over the whole fault model of file stores: 3 and 5 nodes,
both durability modes, storage faults on. Two parts:

- the long part: ``--long`` seeds with the ten times longer safety phase (``--safety-ms``,
  20,000 ms virtual by default), seeds ``first + 0 .. first + long/4 - 1`` in each of the four
  configurations;
- the default part: ``--short`` seeds with the safety phase drawn from the seed, seeds
  ``first + SHORT_OFFSET ..`` in each configuration (so the two parts never run the same seed
  twice).

Work is interleaved across the four configurations, so a sweep cut short (``--minutes``, or
Ctrl-C) has covered each of them alike. A failing seed prints its report (the invariant, every
drawn option and the one-line reproduction) as it happens; the end prints the figures and, with
``--json FILE``, writes them (ranges, wall time, seeds per minute, failures) for the docs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field


#: the configurations every sweep covers: (nodes, durability), all on file stores with storage faults
CONFIGS: tuple[tuple[int, str], ...] = ((3, "page_cache"), (3, "fsync"), (5, "page_cache"), (5, "fsync"))
#: the default part's seeds start this far above ``--first-seed``
SHORT_OFFSET = 1_000_000
LONG_SAFETY_MS = 20_000
DEFAULT_FIRST_SEED = 100_000


@dataclass(frozen=True, slots=True)
class Job:
    seed: int
    nodes: int
    durability: str
    safety_ms: int | None

    def describe(self) -> str:
        phase = f"--safety-ms {self.safety_ms}" if self.safety_ms else "default safety phase"
        return f"seed {self.seed}, {self.nodes} nodes, {self.durability}, {phase}"


def plan(first_seed: int, long: int, short: int, safety_ms: int = LONG_SAFETY_MS) -> list[Job]:
    """The jobs of a sweep, interleaved over ``CONFIGS`` (long part first)."""
    jobs: list[Job] = []
    for count, base, phase in ((long, first_seed, safety_ms), (short, first_seed + SHORT_OFFSET, None)):
        part = [Job(base + k, nodes, durability, phase)
                for k in range(-(-count // len(CONFIGS))) for nodes, durability in CONFIGS]
        jobs += part[:count]
    return jobs


def run_job(job: Job) -> tuple[Job, str | None, int]:
    """Run one seed in a worker: (job, the failure report or None, virtual ms)."""
    from dledger.sim.swarm import SwarmFailure, SwarmOptions, run_swarm

    opts = SwarmOptions.from_seed(job.seed, nodes=job.nodes, durability=job.durability, store="file",
                                  safety_ms=job.safety_ms)
    try:
        result = run_swarm(opts)
    except SwarmFailure as exc:
        return job, str(exc), 0
    virtual = result.now_ms
    result.close()
    return job, None, virtual


def _quiet_worker() -> None:
    # the nodes' warnings (full disks, suspect stores) are part of every faulty run: a failure's
    # report says what matters; Ctrl-C is the parent's to handle
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Progress:
    """One line redrawn on a terminal; elsewhere (a log file, CI) a line a minute."""

    def __init__(self, total: int, out) -> None:
        self.total, self.out = total, out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.t0 = self.last = time.monotonic()

    def update(self, done: int, failed: int) -> None:
        now = time.monotonic()
        if now - self.last < (0.5 if self.tty else 60) and done < self.total:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - done) / rate if rate else 0
        line = (f"soak: {done}/{self.total} seeds, {failed} failed, {60 * rate:.0f} seeds/min, "
                f"{(now - self.t0) / 60:.1f} min so far, about {eta / 60:.0f} min to go")
        self.out.write(f"\r{line} " if self.tty else line + "\n")
        self.out.flush()

    def clear(self) -> None:
        if self.tty:
            self.out.write("\r\033[K")

    def close(self) -> None:
        if self.tty:
            self.out.write("\n")
        self.out.flush()


@dataclass
class Figures:
    jobs: int = 0
    done: int = 0
    virtual_ms: int = 0
    failures: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    stopped_early: bool = False


def sweep(jobs: list[Job], workers: int, minutes: float | None, out=None, progress: bool = True) -> Figures:
    out = out or sys.stderr
    figures = Figures(jobs=len(jobs))
    t0 = time.monotonic()
    deadline = t0 + minutes * 60 if minutes else None
    bar = _Progress(len(jobs), out) if progress else None
    pending: set[Future] = set()
    queue = iter(jobs)
    with ProcessPoolExecutor(max_workers=workers, initializer=_quiet_worker) as pool:
        try:
            for job in queue:
                pending.add(pool.submit(run_job, job))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    job, report, virtual = fut.result()
                    figures.done += 1
                    figures.virtual_ms += virtual
                    if report is not None:
                        figures.failures.append({"seed": job.seed, "nodes": job.nodes, "durability": job.durability,
                                                 "safety_ms": job.safety_ms, "report": report})
                        if bar:
                            bar.clear()
                        print(f"FAILED {report}\n", file=out, flush=True)
                    if bar:
                        bar.update(figures.done, len(figures.failures))
                    if deadline is None or time.monotonic() < deadline:
                        nxt = next(queue, None)
                        if nxt is not None:
                            pending.add(pool.submit(run_job, nxt))
                    else:
                        figures.stopped_early = True
        except KeyboardInterrupt:
            figures.stopped_early = True
            for fut in pending:
                fut.cancel()
    if bar:
        bar.close()
    figures.wall_s = time.monotonic() - t0
    return figures


def summary(args, figures: Figures) -> dict:
    long_jobs = [j for j in plan(args.first_seed, args.long, args.short, args.safety_ms) if j.safety_ms]
    return {
        "long": {"seeds": args.long, "safety_ms": args.safety_ms,
                 "range": [args.first_seed, args.first_seed + -(-args.long // len(CONFIGS)) - 1] if args.long else None,
                 "jobs": len(long_jobs)},
        "short": {"seeds": args.short,
                  "range": [args.first_seed + SHORT_OFFSET,
                            args.first_seed + SHORT_OFFSET + -(-args.short // len(CONFIGS)) - 1] if args.short else None},
        "configs": [f"{n} nodes {d}" for n, d in CONFIGS],
        "workers": args.jobs, "done": figures.done, "planned": figures.jobs,
        "failed": len(figures.failures), "wall_s": round(figures.wall_s, 1),
        "seeds_per_min": round(60 * figures.done / max(figures.wall_s, 1e-9), 1),
        "virtual_s": round(figures.virtual_ms / 1000), "stopped_early": figures.stopped_early,
        "failures": [{k: v for k, v in f.items() if k != "report"} for f in figures.failures],
    }


EXAMPLES = """examples:
  python -m dledger.sim soak                                  # the documented sweep: 5,000 long seeds and
                                                              # 20,000 with the default phase, every core
  python -m dledger.sim soak --long 400 --short 2000 --jobs 2 # a smaller one
  python -m dledger.sim soak --minutes 30 --json soak.json    # stop submitting after 30 minutes; figures to a file
  python -m dledger.sim soak --first-seed 500000              # another range
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dledger.sim soak", description=__doc__.splitlines()[0],
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--long", type=int, default=5_000, help="seeds with the long safety phase (default 5000)")
    p.add_argument("--short", type=int, default=20_000,
                   help="seeds with the safety phase drawn from the seed (default 20000)")
    p.add_argument("--first-seed", type=int, default=DEFAULT_FIRST_SEED,
                   help=f"first seed of the long part; the default part starts {SHORT_OFFSET:,} above "
                        f"(default {DEFAULT_FIRST_SEED})")
    p.add_argument("--safety-ms", type=int, default=LONG_SAFETY_MS,
                   help=f"the long part's safety phase (default {LONG_SAFETY_MS})")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: every core)")
    p.add_argument("--minutes", type=float, default=None, help="stop submitting new seeds after this long")
    p.add_argument("--json", metavar="FILE", default=None, help="write the figures (and the failures) to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("long", "short"):
        if getattr(args, name) < 0:
            parser().error(f"--{name} must be 0 or more, got {getattr(args, name)}")
    if args.jobs < 1:
        parser().error(f"--jobs must be 1 or more, got {args.jobs}")
    jobs = plan(args.first_seed, args.long, args.short, args.safety_ms)
    if not jobs:
        print("nothing to run: --long and --short are both 0", file=sys.stderr)
        return 2
    figures = sweep(jobs, args.jobs, args.minutes, progress=not args.quiet)
    result = summary(args, figures)
    print(f"{figures.done - len(figures.failures)}/{figures.done} seeds passed"
          f"{f' (of {figures.jobs} planned: stopped early)' if figures.stopped_early else ''}"
          f" in {figures.wall_s / 60:.1f} min wall on {args.jobs} workers: {result['seeds_per_min']} seeds/min, "
          f"{result['virtual_s']} s virtual; long part {result['long']['range']} at {args.safety_ms} ms, "
          f"default part {result['short']['range']}; 3 and 5 nodes, page_cache and fsync, file stores, "
          f"storage faults on")
    for f in figures.failures:
        print(f"failed: {f['report'].splitlines()[-1]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 1 if figures.failures else 0
