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


def test_the_segment_reader_imports_neither_server_nor_store():
    """Spark's Python workers import dledger.spark.scan and dledger.spark.compare: they must
    not pay for the server, the core, the transport or the store (``import dledger`` is lazy)."""
    r = _run("import dledger.spark.scan, dledger.spark.compare\n"
             "print(sorted(m for m in sys.modules if m.startswith('dledger')))", [])
    assert r.returncode == 0, r.stderr
    loaded = eval(r.stdout)
    assert loaded == ["dledger", "dledger.entry", "dledger.errors", "dledger.spark",
                      "dledger.spark.compare", "dledger.spark.scan"]


def test_public_names_still_import_from_the_package():
    r = _run("import dledger\nassert 'dledger.server' not in sys.modules\n"
             "from dledger import DLedgerServer, DLedgerConfig, open_store, DLedgerClient\n"
             "assert DLedgerServer.__module__ == 'dledger.server'\n"
             "assert set(dledger.__all__) <= set(dir(dledger))\n"
             "try:\n    dledger.nothing\nexcept AttributeError as e:\n    print(e)", [])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "module 'dledger' has no attribute 'nothing'"
