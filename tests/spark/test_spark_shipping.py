"""The zip that sessions on a cluster or Connect ship to the engine's Python workers."""

import os
import zipfile

from dledger.spark.shipping import executor_zip, is_local, zip_bytes


def test_the_zip_holds_dledger_msgpack_sources_and_the_lookup_modules(tmp_path):
    path = executor_zip(str(tmp_path))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert zf.testzip() is None
    for name in ("dledger/__init__.py", "dledger/spark/datasource.py", "dledger/spark/scan.py",
                 "dledger/broker/message_codec.py", "msgpack/__init__.py",
                 "msgpack/fallback.py", "pyspark_dledger.py", "pyspark_dledger_messages.py"):
        assert name in names
    # sources only: a compiled extension cannot load from a zip, and zlib_ng is left out
    assert all(n.endswith(".py") for n in names)
    assert not any("__pycache__" in n or n.startswith("zlib_ng") for n in names)


def test_the_zip_is_built_once_per_content(tmp_path):
    assert zip_bytes() == zip_bytes()
    first = executor_zip(str(tmp_path))
    mtime = os.stat(first).st_mtime_ns
    assert executor_zip(str(tmp_path)) == first and os.stat(first).st_mtime_ns == mtime
    with open(first, "rb") as f:
        assert f.read() == zip_bytes()
    assert os.path.basename(first).startswith("dledger-pyfiles-")
    assert os.listdir(tmp_path) == [os.path.basename(first)]


def test_only_embedded_masters_are_local():
    for master in ("local", "local[2]", "local[*]", "local[2,3]"):
        assert is_local(master)
    for master in ("spark://127.0.0.1:7077", "local-cluster[2,1,1024]", "yarn", "k8s://x:443",
                   "sc://127.0.0.1:15002"):
        assert not is_local(master)
