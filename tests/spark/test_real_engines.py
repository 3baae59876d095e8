"""The read and the audit on real engines: a standalone master and worker, and a Spark Connect
server, started on loopback from the pyspark package's scripts (``helpers.spark_cluster``).

The user's side sets nothing: ``helpers/spark_user_session.py`` runs with no ``PYSPARK_PYTHON``
and ships no files by hand, as in ``docs/spark.md``. The engines' Python workers cannot import
``dledger``, ``msgpack`` or ``zlib_ng`` from their environment, so every row read there went
through the zip that ``get_session`` ships. Each result must equal the same read or audit on
the local session.
"""

import json
import os
import subprocess
import sys

import pytest

from dledger.spark.audit import EXIT_DIVERGED, run_audit
from helpers.spark_cluster import SparkEngines
from helpers.spark_user_session import RANGE, rows
from spark_stores import bodies, write_store

ENGINES = ["standalone", "connect"]
N = 300
SEGMENT = 16 * 1024
USER_SESSION = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "helpers", "spark_user_session.py")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    cluster = SparkEngines(str(tmp_path_factory.mktemp("spark-engines")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """Three replicas of N entries in three segments each; c diverges inside the committed
    prefix over its last 3 entries (so the audit fails with exit status 1, with detail)."""
    base = tmp_path_factory.mktemp("engine-stores")
    common = bodies(N, seed=5)
    kw = dict(committed=N - 1, data_file_size=SEGMENT)
    return [write_store(str(base / "a"), common, **kw),
            write_store(str(base / "b"), common, **kw),
            write_store(str(base / "c"), common[:N - 3], more_terms=[(2, bodies(3, seed=6))],
                        **kw)]


def _comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("timings", "seconds", "outputs")}


@pytest.fixture(scope="module")
def local(dl, replicas):
    """The same read and audit on the local session, as JSON would give them back."""
    df = dl.read.format("dledger").load(replicas)
    read = json.loads(json.dumps({"rows": rows(df), "range": rows(df.where(RANGE))}))
    return read, _comparable(run_audit(replicas, spark=dl).to_dict())


@pytest.fixture(scope="module", params=ENGINES)
def session(request, engines, replicas, tmp_path_factory):
    """One user's session (read, then ``dledger audit``) against the engine: its process
    (exit status, stdout, stderr) and its result directory. The engines run one at a time:
    on a small machine two sessions at once take as long as one after the other."""
    result = tmp_path_factory.mktemp(f"user-{request.param}")
    proc = subprocess.run(
        [sys.executable, USER_SESSION, getattr(engines, request.param), str(result), *replicas],
        env=engines.client_env(), cwd=os.path.dirname(replicas[0]), capture_output=True,
        text=True, timeout=300)
    return proc, result


def test_read_on_a_real_engine_equals_the_local_read(session, local):
    proc, result = session
    assert (result / "read.json").exists(), proc.stderr[-3000:]
    got = json.loads((result / "read.json").read_text())
    assert len(got["rows"]) == 3 * N and len(got["range"]) == 3 * 20
    assert got["rows"] == local[0]["rows"]
    assert got["range"] == local[0]["range"]
    # the engine's workers ran dledger from the shipped zip, with msgpack's pure-Python code
    where, packer = got["workers"].split()
    assert where.endswith(".zip/dledger/__init__.py") and "dledger-pyfiles-" in where
    assert packer == "msgpack.fallback"


def test_dledger_audit_on_a_real_engine_reports_as_local(session, local):
    proc, result = session
    assert proc.returncode == EXIT_DIVERGED, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith("audit of 3 replicas: DIVERGED: 3 entries")
    report = json.loads((result / "audit" / "audit.json").read_text())
    assert _comparable(report) == local[1]
    assert report["divergent_count"] == report["committed_divergent_count"] == 3
    assert (result / "audit" / "audit.png").stat().st_size > 10_000
