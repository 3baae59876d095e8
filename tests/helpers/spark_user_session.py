"""A user's session against the engine at MASTER, run as its own process (a process has one
SparkContext; the test process already holds a local one):

    python spark_user_session.py MASTER RESULT_DIR STORE_DIR [STORE_DIR ...]

1. reads the stores through ``format("dledger")`` in a ``get_session(MASTER)`` session and
   writes ``RESULT_DIR/read.json``: every row (binary columns as hex), the rows of an
   index-range query (pushed down), and the files of the ``dledger`` and ``msgpack`` modules
   that the engine's Python workers imported;
2. runs ``dledger audit --master MASTER --out RESULT_DIR/audit`` with the store paths relative
   to the working directory, through the command's entry point (``dledger.cli.main``; it
   reuses the session and stops it), and exits with the audit's exit status.

Nothing is set up by hand: no ``PYSPARK_PYTHON``, no shipped files.
"""

import json
import os
import sys

from dledger.cli import main as dledger_main
from dledger.spark.session import get_session
from pyspark.sql import functions as F

RANGE = "index >= 100 AND index < 120"


def rows(df):
    """Every row as a list of its columns (binary as hex), sorted."""
    return sorted([v.hex() if isinstance(v, (bytes, bytearray)) else v for v in r]
                  for r in df.collect())


def worker_modules(_):
    import dledger
    import msgpack
    return f"{dledger.__file__} {msgpack.Packer.__module__}"


def main(master: str, result_dir: str, paths: list[str]) -> int:
    os.makedirs(result_dir, exist_ok=True)
    spark, _owned = get_session(master, "dledger-user-session")
    df = spark.read.format("dledger").load(paths)
    out = {"rows": rows(df), "range": rows(df.where(RANGE)),
           "workers": spark.range(1).select(F.udf(worker_modules, "string")("id")).first()[0]}
    with open(os.path.join(result_dir, "read.json"), "w") as f:
        json.dump(out, f)
    return dledger_main(["audit", "--master", master, "--out", os.path.join(result_dir, "audit"),
                         *(os.path.relpath(p) for p in paths)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
