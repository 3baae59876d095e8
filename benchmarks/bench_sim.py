"""Simulated seconds per wall second of the deterministic simulator.

    python benchmarks/bench_sim.py [--idle-seconds S] [--seeds N]

Rows: an idle 3-node cluster (heartbeats only) and a 5-node cluster (memory stores) under
the swarm fault schedule of ``dledger.sim.swarm`` (partitions, crashes, restarts, loss,
duplication, clients appending), plus the same 3-node swarm on file stores. Each row runs
twice: with every envelope through the wire codec (the default) and without it
(``NetworkOptions(codec=False)``), which measures what the codec costs the simulator.
``cpu s`` is the process's CPU time: on a shared machine it is steadier than the wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from dledger.sim import Cluster, NetworkOptions, SwarmOptions, run_swarm  # noqa: E402


def idle(seconds: int, codec: bool) -> tuple[float, float, float, int]:
    c = Cluster(n=3, seed=1, network=NetworkOptions(codec=codec))
    c.run_until(lambda: c.leader() is not None, 2_000)
    start_v, events0 = c.now_ms, c.scheduler.events_run
    t0, c0 = time.perf_counter(), time.process_time()
    c.run_for(seconds * 1000)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return (c.now_ms - start_v) / 1000, wall, cpu, c.scheduler.events_run - events0


def swarm(nodes: int, seeds: int, store: str, codec: bool) -> tuple[float, float, float, int, int]:
    virtual = wall = cpu = 0.0
    events = ops = 0
    for seed in range(seeds):
        t0, c0 = time.perf_counter(), time.process_time()
        c = run_swarm(SwarmOptions.from_seed(seed, nodes=nodes, store=store, codec=codec))
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        virtual += c.now_ms / 1000
        events += c.scheduler.events_run
        ops += len(c.history)
        c.close()
    return virtual, wall, cpu, events, ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--idle-seconds", type=int, default=3_600)
    p.add_argument("--seeds", type=int, default=40)
    a = p.parse_args()
    print(f"# {' '.join(sys.argv)}")
    print(f"# {platform.python_version()} {platform.system()} {platform.machine()}, {os.cpu_count()} cpus")
    print(f"{'scenario':<40}{'virtual s':>11}{'wall s':>9}{'cpu s':>8}{'x real time':>13}{'events/s':>11}")
    for codec in (True, False):
        tag = "codec" if codec else "no codec"
        v, w, cpu, e = idle(a.idle_seconds, codec)
        label = f"idle, 3 nodes, {tag}"
        print(f"{label:<40}{v:>11.0f}{w:>9.2f}{cpu:>8.2f}{v / w:>13,.0f}{e / w:>11,.0f}")
        for nodes, store in ((5, "memory"), (3, "memory"), (3, "file")):
            seeds = a.seeds if store == "memory" else max(a.seeds // 4, 1)
            v, w, cpu, e, ops = swarm(nodes, seeds, store, codec)
            label = f"swarm, {nodes} nodes, {store} ({seeds} seeds), {tag}"
            print(f"{label:<40}{v:>11.0f}{w:>9.2f}{cpu:>8.2f}{v / w:>13,.0f}{e / w:>11,.0f}")


if __name__ == "__main__":
    main()
