"""The ``dledger audit`` command line: parsing, exit codes, and one-line errors.

Kept apart from ``dledger.spark.audit`` so that ``dledger audit --help`` and argument errors
need neither pyspark nor numpy: nothing heavy is imported until the audit runs.

Exit codes (also in ``--help`` and ``docs/spark.md``):
- 0 (``EXIT_OK``): no divergence inside the committed prefix, no damage;
- 1 (``EXIT_DIVERGED``): replicas that all count an index as committed hold different
  entries there (a safety violation);
- 2 (``EXIT_ERROR``): the audit could not run: bad arguments, a path that is not a store, a
  store that cannot be read, a missing ``spark`` extra, or a Spark failure (one line on
  stderr, never a traceback);
- 3 (``EXIT_CORRUPT``): damaged entries, and no committed divergence;
- 4 (``EXIT_UNKNOWN``): the replicas diverge past their common prefix and no replica knows
  its committed index (stores without a checkpoint, such as Java DLedger's), so whether
  committed entries differ cannot be told; ``--committed N`` settles it.

Options may come before or after the paths (``parse_intermixed_args``). Relative paths are
made absolute before the job runs: a cluster's executors do not share this working directory.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from dledger.spark.exit_codes import (EXIT_CORRUPT, EXIT_DIVERGED, EXIT_ERROR,  # noqa: F401
                                      EXIT_OK, EXIT_UNKNOWN)

EPILOG = """\
example:
  dledger audit /data/dledger-n0 /data/dledger-n1 /data/dledger-n2 --out audit-out
  dledger audit --master 'local[2]' --committed 5000 /java/n0 /java/n1

exit status:
  0  sound: no divergence inside the committed prefix, no damage (lagging replicas
     and divergent uncommitted tails are reported, not failed)
  1  replicas that all count an index as committed hold different entries there
  2  the audit could not run (bad arguments, not a store, unreadable store, Spark failure)
  3  damaged entries (CRC mismatch or broken records), no committed divergence
  4  unknown: the replicas diverge and no replica knows its committed index (stores
     without a checkpoint, e.g. Java's); pass --committed N to decide
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dledger audit", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare the logs of several replicas entry by entry with a Spark job; "
                    "prints a summary and writes audit.json and audit.png.")
    p.add_argument("paths", nargs="+", metavar="DIR",
                   help="store directories, one per replica (at least two)")
    p.add_argument("--master", default=None,
                   help="local[N] (default: local[*]), spark://host:7077, or sc://host:15002 "
                        "(Spark Connect)")
    p.add_argument("--out", default="dledger-audit",
                   help="directory for audit.json and audit.png (default: ./dledger-audit)")
    p.add_argument("--committed", type=int, default=None,
                   help="treat this index as committed on every replica (default: each "
                        "replica's checkpoint)")
    p.add_argument("--names", default=None, help="comma-separated replica names, in path order")
    p.add_argument("--no-recover", action="store_true",
                   help="skip each store's read-only recovery (faster on big stores without a "
                        "checkpoint, such as Java's; a torn tail then shows up as corrupt)")
    return p


def one_line(exc: BaseException) -> str:
    """A Spark or Py4J error (often a page of JVM and worker traces) as one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    # the Python error a worker raised, when the message carries its traceback
    cause = [ln for ln in lines[1:] if re.match(r"^[A-Za-z_.]*(Error|Exception): ", ln)]
    if cause and cause[-1] not in first:
        first = f"{first} ({cause[-1]})"
    return first if len(first) <= 400 else first[:397] + "..."


def _spark_errors() -> tuple:
    errors: list = []
    try:
        from pyspark.errors import PySparkException
        errors.append(PySparkException)
    except ImportError:  # pragma: no cover - no spark extra
        pass
    try:
        from py4j.protocol import Py4JError
        errors.append(Py4JError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    names = [x.strip() for x in args.names.split(",")] if args.names else None
    try:
        from dledger.spark.audit import run_audit
    except ImportError as exc:
        from dledger.spark import install_hint

        print(f"dledger audit: error: the audit needs the spark extra ({exc}): {install_hint()}", file=sys.stderr)
        return EXIT_ERROR
    from dledger.errors import DLedgerError
    from dledger.spark.scan import replica_names

    # the executors of a cluster (and a Connect server) do not share this working directory:
    # they get absolute paths, and the replicas keep the names their paths as given had
    names = names or replica_names(args.paths)
    paths = [os.path.abspath(p) for p in args.paths]
    try:
        report = run_audit(paths, master=args.master, out_dir=args.out,
                           committed=args.committed, names=names, recover=not args.no_recover)
    except (ValueError, OSError, DLedgerError) as exc:
        print(f"dledger audit: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except _spark_errors() as exc:
        print(f"dledger audit: error: Spark failed: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    for line in report.summary_lines():
        print(line)
    return report.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
