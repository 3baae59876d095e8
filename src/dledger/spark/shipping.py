"""What a cluster's Python workers need to run the data sources, as one zip sent with the job.

The executors of a standalone (or YARN, Kubernetes) cluster and the server of Spark Connect
import ``dledger`` to run ``read()``: ``executor_zip()`` packs what that import needs that a
plain PySpark node lacks, and ``ship(spark)`` sends it with the session (``addPyFile`` on a
classic session, ``addArtifacts(..., pyfile=True)`` over Connect, which refuses wheels):

- the ``dledger`` package (sources only);
- the top-level ``pyspark_dledger*`` modules (the ``pyspark_*`` lookup of ``format("dledger")``);
- ``msgpack``'s Python modules: from a zip its C extension cannot load, and it falls back to
  its pure-Python implementation (``dledger.protocol`` imports it; the scan does not use it).

``zlib-ng`` is left out: ``dledger.entry`` falls back to ``zlib.crc32`` (the same CRC-32)
when it is missing. pyarrow, pandas and numpy are not shipped: they are PySpark's own
requirements for Python data sources, part of every node's Python.

The zip is deterministic (sorted names, fixed timestamps) and named by the hash of its bytes,
so it is built once per content into the temporary directory, and a new dledger version never
meets an older zip of the same name in a running Spark.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile

#: Top-level packages and modules the zip carries, found where this interpreter imports them.
PACKAGES = ("dledger", "msgpack")
MODULES = ("pyspark_dledger", "pyspark_dledger_messages")
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _sources() -> list[tuple[str, str]]:
    """(name in the zip, file on disk) for every ``.py`` file shipped, sorted by name."""
    import importlib

    out = []
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        root = os.path.dirname(os.path.abspath(pkg.__file__))
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in filenames:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, os.path.dirname(root))
                    out.append((rel.replace(os.sep, "/"), path))
    for name in MODULES:
        mod = importlib.import_module(name)
        out.append((f"{name}.py", os.path.abspath(mod.__file__)))
    return sorted(out)


def zip_bytes() -> bytes:
    """The zip's content (see the module docstring)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, path in _sources():
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(path, "rb") as f:
                zf.writestr(info, f.read())
    return buf.getvalue()


def executor_zip(directory: str | None = None) -> str:
    """The path of ``dledger-pyfiles-<hash>.zip`` in ``directory`` (default: the temporary
    directory), written there unless a file of that name already exists."""
    data = zip_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    directory = directory or tempfile.gettempdir()
    path = os.path.join(directory, f"dledger-pyfiles-{digest}.zip")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(prefix=".dledger-pyfiles-", suffix=".zip", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # readable by other users' sessions that find it there
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def is_local(master: str) -> bool:
    """True for the embedded masters ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``
    (``local-cluster[...]`` runs separate executor processes, like a real cluster)."""
    return master == "local" or master.startswith("local[")


def ship(spark, connect: bool = False) -> str:
    """Send the zip with ``spark`` (a classic session, or a Connect one if ``connect``);
    returns its path. Call it before ``dledger.spark.register``: a classic session captures
    its Python files when a data source is registered."""
    path = executor_zip()
    if connect:
        spark.addArtifacts(path, pyfile=True)
    else:
        spark.sparkContext.addPyFile(path)
    return path
