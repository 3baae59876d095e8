"""Fixed store workloads for counting instructions: leader batches, single appends, push
reads, follower batch writes and entry reads, all with 128 B bodies, on the production file store.

Wall-clock rates on a shared 2-core machine move by a factor of two between runs; the number of
instructions a fixed workload executes does not. With no argument the script runs every workload
under valgrind's callgrind (Debian package ``valgrind``) and prints the instructions of each, net
of the ``none`` workload (interpreter start, imports, opening a store):

    python benchmarks/bench_store_instructions.py            # the table (a few minutes)
    python benchmarks/bench_store_instructions.py batch      # one workload, to run under a profiler

Workloads: ``batch`` 40 leader batches of 1,000; ``single`` 20,000 single leader appends;
``pushread`` the 40,000 entries read back for pushes in ranges of up to 1,000; ``follower``
the same ranges written to a follower store; ``read`` the 40,000 entries read back one by one
(``iter_entries``, as committed entries are applied); ``term`` the term of each of them
(``get_entry_term``, which the core asks around every push and vote). The last four include
the 40 batches that wrote the entries.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from dledger.entry import DLedgerEntry  # noqa: E402
from dledger.store import DLedgerMmapFileStore  # noqa: E402

WORKLOADS = ("none", "batch", "single", "pushread", "follower", "read", "term")


def count(workload: str) -> int:
    import re
    import subprocess
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          __file__, workload], capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


if len(sys.argv) == 1:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    base = count("none")
    print(f"instructions net of start-up ({base:,}), {sys.version.split()[0]}")
    print(f"{'workload':10} {'instructions':>15} {'per entry':>10}")
    for w in WORKLOADS[1:]:
        n = count(w) - base
        entries = 20_000 if w == "single" else 40_000
        print(f"{w:10} {n:>15,} {n // entries:>10,}")
    sys.exit(0)
if len(sys.argv) != 2 or sys.argv[1] not in WORKLOADS:
    sys.exit(f"usage: bench_store_instructions.py [{'|'.join(WORKLOADS)}]")
what = sys.argv[1]
d = tempfile.mkdtemp()
try:
    s = DLedgerMmapFileStore.open(os.path.join(d, "l"), data_file_size=64 << 20, index_file_size=32 * (1 << 20))
    s.persist_term(1, None)
    body = b"x" * 128
    if what == "none":
        pass
    elif what == "batch":
        for _ in range(40):
            s.batch_append_as_leader([body] * 1000)
    elif what == "single":
        for _ in range(20000):
            s.append_as_leader(DLedgerEntry(body=body))
    elif what == "read":
        for _ in range(40):
            s.batch_append_as_leader([body] * 1000)
        for _entry in s.iter_entries():
            pass
    elif what == "term":
        for _ in range(40):
            s.batch_append_as_leader([body] * 1000)
        for i in range(40000):
            s.get_entry_term(i)
    else:
        for _ in range(40):
            s.batch_append_as_leader([body] * 1000)
        f = DLedgerMmapFileStore.open(os.path.join(d, "f"), data_file_size=64 << 20, index_file_size=32 * (1 << 20))
        f.persist_term(1, None)
        i = 0
        while i < 40000:
            raw, n = s.get_raw_range(i, 1 << 20, 1000)
            if what == "follower":
                f.batch_append_as_follower(raw, 1)
            i += n
        f.close()
    s.close()
finally:
    shutil.rmtree(d)
