"""The class-data-sharing archive of local sessions: where it goes, how a finished part file
is put in place, and that nothing is asked of a machine without a cache directory."""

import os
import sys

from dledger.spark import jvm_archive

MAGIC = jvm_archive.DYNAMIC_MAGIC.to_bytes(4, sys.byteorder)


def fake_spark_home(tmp_path, jars=("a.jar", "b.jar")):
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in jars:
        (home / "jars" / name).write_bytes(b"x" * len(name))
    return str(home)


def test_off_and_default_locations(monkeypatch, tmp_path):
    monkeypatch.setenv("DLEDGER_JVM_CACHE", "off")
    assert jvm_archive.cache_dir() is None
    assert jvm_archive.jvm_options(fake_spark_home(tmp_path)) == ""
    monkeypatch.delenv("DLEDGER_JVM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jvm_archive.cache_dir() == str(tmp_path / "xdg" / "dledger")


def test_first_run_writes_a_part_next_run_maps_the_archive(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DLEDGER_JVM_CACHE", str(cache))
    home = fake_spark_home(tmp_path)
    first = jvm_archive.jvm_options(home)
    assert "-XX:ArchiveClassesAtExit=" in first and "-Xlog:cds=off" in first
    part = first.split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    assert os.path.dirname(part) == str(cache) and part.endswith(".part")
    # the JVM is still writing (no header yet): the next run writes its own part
    with open(part, "wb") as f:
        f.write(b"\0" * 64)
    second = jvm_archive.jvm_options(home)
    assert "-XX:ArchiveClassesAtExit=" in second and part not in second
    # the JVM finished (the header, with the magic, is written last): it is put in place
    with open(part, "r+b") as f:
        f.write(MAGIC)
    third = jvm_archive.jvm_options(home)
    key = jvm_archive.archive_key(jvm_archive._java(), home)
    archive = str(cache / f"spark-{key}.jsa")
    assert third.startswith(f"-XX:SharedArchiveFile={archive} ")
    assert os.path.exists(archive) and not os.path.exists(part)


def test_a_new_spark_install_gets_a_new_key(tmp_path):
    java = jvm_archive._java()
    a = jvm_archive.archive_key(java, fake_spark_home(tmp_path / "1"))
    b = jvm_archive.archive_key(java, fake_spark_home(tmp_path / "2", jars=("a.jar", "c2.jar")))
    assert a != b


def test_a_part_whose_jvm_died_is_removed_after_an_hour(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DLEDGER_JVM_CACHE", str(cache))
    home = fake_spark_home(tmp_path)
    part = jvm_archive.jvm_options(home).split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    with open(part, "wb") as f:
        f.write(b"\0" * 64)
    old = os.path.getmtime(part) - jvm_archive.STALE_PART_SECONDS - 5
    os.utime(part, (old, old))
    jvm_archive.jvm_options(home)
    assert not os.path.exists(part)


def test_a_session_with_the_archive_flags_starts_and_reads(tmp_path):
    """Two real local sessions in fresh processes: the first writes the archive at exit, the
    second maps it; both run a query and print nothing about CDS."""
    import subprocess

    code = ("from dledger.spark.session import get_session\n"
            "s, _ = get_session('local[1]', sources=False)\n"
            "print(s.range(5).count())\n"
            "print(s.sparkContext.getConf().get('spark.driver.extraJavaOptions'))\n"
            "s.stop()\n")
    env = dict(os.environ, DLEDGER_JVM_CACHE=str(tmp_path / "cds"))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, stdin=subprocess.DEVNULL, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "[cds" not in r.stdout + r.stderr and "shared archive" not in r.stderr.lower()
        outs.append(r.stdout.splitlines())
    assert outs[0][0] == outs[1][0] == "5"
    assert "-XX:ArchiveClassesAtExit=" in outs[0][1]
    archives = [n for n in os.listdir(tmp_path / "cds") if n.endswith(".jsa")]
    if archives:   # the first JVM had finished writing when the second session started
        assert "-XX:SharedArchiveFile=" in outs[1][1]
