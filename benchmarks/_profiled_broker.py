"""``dledger`` under cProfile, every thread: a broker process of ``bench_broker_protocols.py --profile``.

    _profiled_broker.py OUT.prof dledger-arguments...

Runs ``dledger.cli.main`` with a profiler in each thread (the main thread's, and one started
by ``threading.setprofile`` in every thread started later: the runtime loop, the remoting and
gRPC loops, the broker port's connection threads, worker threads), timed by each thread's CPU
clock (``time.thread_time``: a thread waiting costs nothing). When the command returns (SIGTERM
stops a broker cleanly), the profiles are merged into OUT.prof (``pstats``); threads still
running then are stopped first. Profiling slows the process several times over: its figures
say where the time goes, not how fast the broker is.
"""

import cProfile
import pstats
import sys
import threading
import time

profiles: list[cProfile.Profile] = []
lock = threading.Lock()


def start_here(*_args) -> None:
    """The first profile event of a new thread: a profiler of its own replaces this hook."""
    p = cProfile.Profile(time.thread_time)
    with lock:
        profiles.append(p)
    p.enable()


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    from dledger.cli import main as dledger_main

    threading.setprofile(start_here)
    start_here()
    try:
        code = dledger_main(argv)
    finally:
        threading.setprofile(None)
        with lock:
            done = list(profiles)
        for p in done:
            p.disable()
        stats = None
        for p in done:
            p.create_stats()
            if not p.stats:
                continue
            if stats is None:
                stats = pstats.Stats(p)
            else:
                stats.add(p)
        if stats is not None:
            stats.dump_stats(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
