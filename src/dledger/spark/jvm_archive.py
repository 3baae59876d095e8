"""A class-data-sharing archive for the driver JVM of embedded local sessions.

Starting a local session loads several thousand classes from Spark's jars, and on a small
machine that is most of the session start (measured in ``docs/spark.md``). HotSpot (JDK 13
and later) can map the classes a previous run loaded from an archive instead (dynamic CDS):
the first local session for a given Java runtime and Spark installation writes one when its
JVM exits (``-XX:ArchiveClassesAtExit``), and later sessions map it
(``-XX:SharedArchiveFile``). ``jvm_options()`` returns the flags for this run.

Rules:
- where: ``$DLEDGER_JVM_CACHE``, else ``$XDG_CACHE_HOME/dledger``, else ``~/.cache/dledger``;
  ``DLEDGER_JVM_CACHE=off`` turns the archive off. An archive is about 150 MB;
- which: one archive per key, a hash of the Java runtime (the ``java`` Spark starts, its
  ``release`` file) and the Spark installation (its home and the names and sizes of its jars),
  so an upgrade of either starts a new archive. HotSpot checks an archive itself (the JVM
  build, the class path) and ignores one that does not fit: the worst case is a run without it;
- writing: each JVM writes its own part file (``<key>.<pid>-<random>.part``). HotSpot writes
  the archive's header last, so a part file that begins with the dynamic archive's magic
  number is complete; the next session renames it into place (an atomic rename: no JVM ever
  maps a half-written archive, and concurrent first runs do not clash). Part files that never
  completed (a JVM killed while writing) are removed after ``STALE_PART_SECONDS``;
- quiet: CDS logging is off (its warnings would go to the user's terminal), and
  ``-XX:+IgnoreUnrecognizedVMOptions`` keeps a JVM that lacks these flags starting;
- never in the way: any error while preparing (no ``java``, a read-only cache) gives no flags.
"""

from __future__ import annotations

import glob
import hashlib
import os
import secrets
import shutil
import sys
import time

#: HotSpot's magic number of a dynamic archive, the first 4 bytes of a complete one
DYNAMIC_MAGIC = 0xF00BABA8

#: part files older than this that are not complete archives are removed
STALE_PART_SECONDS = 3600

#: flags common to writing and mapping: no CDS messages, no failure on a JVM without CDS
QUIET = "-XX:+IgnoreUnrecognizedVMOptions -Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> str | None:
    """The archive directory (see the module docstring); None when turned off."""
    value = os.environ.get("DLEDGER_JVM_CACHE")
    if value is not None:
        if value.strip().lower() in ("", "off", "0", "false", "no"):
            return None
        return value
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dledger")


def _java() -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    path = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(path) if path and os.path.exists(path) else None


def archive_key(java: str, spark_home: str) -> str:
    """A hash of what an archive depends on (see the module docstring)."""
    h = hashlib.sha256()
    h.update(java.encode())
    release = os.path.join(os.path.dirname(os.path.dirname(java)), "release")
    if os.path.exists(release):
        with open(release, "rb") as f:
            h.update(f.read())
    st = os.stat(java)
    h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(os.path.realpath(spark_home).encode())
    jars = os.path.join(spark_home, "jars")
    for name in sorted(os.listdir(jars)) if os.path.isdir(jars) else ():
        h.update(f"{name}:{os.path.getsize(os.path.join(jars, name))}".encode())
    return h.hexdigest()[:16]


def is_complete(path: str) -> bool:
    """True when ``path`` begins with the dynamic archive's magic (HotSpot writes it last)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, sys.byteorder) == DYNAMIC_MAGIC


def _promote(directory: str, key: str, archive: str) -> None:
    """Rename a complete part file of ``key`` into place; remove the other finished ones."""
    now = time.time()
    for part in sorted(glob.glob(os.path.join(directory, f"{key}.*.part"))):
        try:
            if is_complete(part):
                if os.path.exists(archive):
                    os.remove(part)           # a second first run's archive: not needed
                else:
                    os.replace(part, archive)
            elif now - os.path.getmtime(part) > STALE_PART_SECONDS:
                os.remove(part)               # its JVM died while writing it
        except OSError:
            continue


def jvm_options(spark_home: str | None = None) -> str:
    """The flags that map this machine's archive, or write it when there is none yet."""
    try:
        directory = cache_dir()
        java = _java()
        if directory is None or java is None:
            return ""
        if spark_home is None:
            from pyspark.find_spark_home import _find_spark_home
            spark_home = _find_spark_home()
        key = archive_key(java, spark_home)
        os.makedirs(directory, exist_ok=True)
        if any(c.isspace() or c in "\"'" for c in directory):
            return ""   # extraJavaOptions is split on whitespace
        archive = os.path.join(directory, f"spark-{key}.jsa")
        _promote(directory, f"spark-{key}", archive)
        if os.path.exists(archive):
            return f"-XX:SharedArchiveFile={archive} {QUIET}"
        if not os.access(directory, os.W_OK):
            return ""
        part = os.path.join(directory, f"spark-{key}.{os.getpid()}-{secrets.token_hex(4)}.part")
        return f"-XX:ArchiveClassesAtExit={part} {QUIET}"
    except (OSError, ImportError, ValueError):
        return ""
