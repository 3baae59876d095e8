"""The main job on embedded defaults (``make run`` / ``dledger demo``), storage-only edition.

Appends a stream of entries to a file store with a progress bar, closes it, reopens it (timed
recovery), reads every entry back and checks it, and prints entries, throughput and times.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from dledger.progress import Progress
from dledger.store import DLedgerMmapFileStore


def main(args) -> int:
    base = args.dir or tempfile.mkdtemp(prefix="dledger-demo-")
    node = os.path.join(base, "dledger-n0")
    total = args.entries
    batch = 1000
    print(f"dledger demo: {total:,} entries into {node}")
    t0 = time.perf_counter()
    with DLedgerMmapFileStore.open(node, data_file_size=64 * 1024 * 1024,
                                   index_file_size=32 * 1024 * 1024) as store:
        start = store.ledger_end_index + 1
        with Progress(total, "append", unit="entries", force=True) as bar:
            done = 0
            while done < total:
                n = min(batch, total - done)
                store.batch_append_as_leader([f"entry {start + done + k}".encode() * 4 for k in range(n)])
                done += n
                bar.update(done)
        store.update_committed_index(store.ledger_end_index)
    append_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    store = DLedgerMmapFileStore.open(node, data_file_size=64 * 1024 * 1024, index_file_size=32 * 1024 * 1024)
    reopen_s = time.perf_counter() - t1
    bad = 0
    t2 = time.perf_counter()
    with Progress(total, "verify", unit="entries", force=True) as bar:
        for k, entry in enumerate(store.iter_entries(start, start + total - 1)):
            if entry.body != f"entry {entry.index}".encode() * 4:
                bad += 1
            if k % 1000 == 0:
                bar.update(k)
        bar.update(total)
    verify_s = time.perf_counter() - t2
    store.close()
    print(f"entries appended : {total:,}")
    print(f"append throughput: {total / append_s:,.0f} entries/s ({append_s:.2f} s, batches of {batch})")
    print(f"reopen (recovery): {reopen_s * 1000:.1f} ms")
    print(f"verify           : {total / verify_s:,.0f} entries/s, {bad} mismatches")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0
