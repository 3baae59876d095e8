"""pyspark stays an optional extra: the library imports without it."""

import subprocess
import sys

BLOCK = "import sys\nfor m in {mods!r}: sys.modules[m] = None\n"


def _run(code, mods):
    return subprocess.run([sys.executable, "-c", BLOCK.format(mods=mods) + code],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


def test_core_imports_without_pyspark_numpy_or_pyarrow():
    r = _run("import dledger, dledger.entry, dledger.store, dledger.cli, dledger.spark\n"
             "import dledger.spark.messages\nprint('ok')",
             ["pyspark", "numpy", "pyarrow", "matplotlib"])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_scan_and_audit_import_without_pyspark():
    r = _run("import dledger.spark.scan, dledger.spark.audit, dledger.spark.chart\nprint('ok')",
             ["pyspark"])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_data_source_says_it_needs_pyspark():
    r = _run("import dledger.spark.datasource", ["pyspark"])
    assert r.returncode != 0 and "pyspark" in r.stderr
