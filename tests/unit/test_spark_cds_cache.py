"""The test run's class-data archive (devkit/spark_cds.py) is kept per user and reused by a later run of the same
class path: its key follows every jar's path, size and modification time (what the JDK checks before it maps an
archive), and only the archives used last are kept."""

from __future__ import annotations

import os

from devkit import spark_cds


def test_the_key_changes_with_a_jars_modification_time_and_not_otherwise(tmp_path, monkeypatch):
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"core")
    extra = tmp_path / "delta.jar"
    extra.write_bytes(b"delta")
    monkeypatch.setattr(spark_cds, "spark_jars", lambda: [str(extra)])
    env = {"SPARK_HOME": str(home), "SPARK_CONF_DIR": str(tmp_path / "conf")}
    key = spark_cds.archive_key(env)
    assert spark_cds.archive_key(env) == key
    os.utime(extra, ns=(1, 1))  # a jar rebuilt at the same path: the JDK would refuse the old archive
    assert spark_cds.archive_key(env) != key
    touched = spark_cds.archive_key(env)
    os.utime(home / "jars" / "spark-core.jar", ns=(2, 2))
    assert spark_cds.archive_key(env) not in (key, touched)


def test_prune_keeps_the_archive_in_use_and_the_ones_used_last(tmp_path):
    archives = [tmp_path / f"spark-{n}.jsa" for n in range(5)]
    for age, archive in enumerate(archives):
        archive.write_bytes(b"x")
        os.utime(archive, (1_000 + age, 1_000 + age))  # spark-4 used last
    (tmp_path / "spark-9.123.partial").write_bytes(b"x")  # another run's training: not an archive yet
    spark_cds._prune(tmp_path, archives[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-0.jsa", "spark-3.jsa", "spark-4.jsa",
                                                          "spark-9.123.partial"]


def test_the_archives_live_in_the_users_cache_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("TIDEMARK_USER_JVM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert spark_cds.user_cache() == tmp_path / "tidemark" / "jvm"
    monkeypatch.setenv("TIDEMARK_USER_JVM_CACHE", str(tmp_path / "own"))
    assert spark_cds.user_cache() == tmp_path / "own"
