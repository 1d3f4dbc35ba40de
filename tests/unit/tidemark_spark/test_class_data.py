"""Class-data sharing for the ingest job's JVM (tidemark_spark.class_data): when a launch may train or map
an archive, one trainer at a time, and what a training run leaves behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tidemark_spark import class_data


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A launch that may share class data: an empty SPARK_CONF_DIR, archives in a private folder."""
    conf = tmp_path / "conf"
    conf.mkdir()
    return {"PATH": os.environ["PATH"], "SPARK_HOME": "/opt/spark", "SPARK_CONF_DIR": str(conf),
            class_data.DIR_ENV_VAR: str(tmp_path / "cds")}


JARS = ["/jars/kafka.jar", "/jars/delta.jar"]


def test_a_local_or_standalone_driver_with_an_empty_conf_folder_may_share_class_data(env):
    assert class_data.why_not(env, "local[2]", {}) is None
    assert class_data.why_not(env, "spark://10.0.0.5:7077", {}) is None


@pytest.mark.parametrize(("change", "master", "conf", "reason"), [
    ({class_data.DIR_ENV_VAR: "off"}, "local[2]", {}, "TIDEMARK_CDS_DIR=off"),
    ({"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/x.jsa"}, "local[2]", {}, "caller's JVM options"),
    ({}, "local[2]", {"spark.driver.extraJavaOptions": "-Xshare:off"}, "caller's JVM options"),
    ({}, "yarn", {}, "master 'yarn'"),
    ({}, "k8s://https://api:6443", {}, "only local and standalone"),
    ({"HADOOP_CONF_DIR": "/etc/hadoop"}, "local[2]", {}, "HADOOP_CONF_DIR"),
    ({}, "local[2]", {"spark.driver.extraClassPath": "/opt/extra"}, "spark.driver.extraClassPath"),
    ({"SPARK_CONF_DIR": ""}, "local[2]", {}, "SPARK_CONF_DIR (unset)"),
])
def test_a_driver_whose_class_path_or_options_tidemark_does_not_own_runs_without(env, change, master, conf, reason):
    assert reason in (class_data.why_not({**env, **change}, master, conf) or "")
    assert class_data.prepare({**env, **change}, master, conf, JARS) == class_data.ClassData()


def test_a_conf_folder_with_a_file_would_fail_the_dump_so_it_runs_without(env):
    (Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert "not an empty folder" in class_data.why_not(env, "local[2]", {})


def test_the_first_launch_trains_one_at_a_time_and_the_next_maps_the_archive(env, caplog):
    trainer = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    assert trainer.training and not trainer.java_options  # the caller trains: class_data_train
    # the lock: one trainer at a time
    with caplog.at_level("INFO", logger="tidemark_spark.class_data"):
        assert class_data.prepare(env, "local[2]", {}, JARS, background=False) == class_data.ClassData()
    assert "another process is training it" in caplog.text
    assert class_data.prepare(env, "local[2]", {}, JARS, train=False,
                              background=False) == class_data.ClassData()

    trainer.partial.write_bytes(b"archive")  # what the JVM dumps as it exits
    trainer.finish(0)
    assert sorted(p.name for p in trainer.archive.parent.iterdir()) == [trainer.archive.name]
    with caplog.at_level("INFO", logger="tidemark_spark.class_data"):
        user = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    assert not user.training and user.java_options == f"-XX:SharedArchiveFile={trainer.archive} {class_data.QUIET}"
    assert f"the job's JVM maps the class-data archive {trainer.archive}" in caplog.messages  # the task's log says so
    assert user.environment({**env, "SPARK_SUBMIT_OPTS": "-Dx=1"})["SPARK_SUBMIT_OPTS"] == f"-Dx=1 {user.java_options}"


def test_a_new_class_path_trains_a_new_archive_and_only_the_newest_three_are_kept(env, tmp_path):
    jar = tmp_path / "delta.jar"
    archives = []
    for version in range(1, 5):  # an upgrade after another (a new jar: a new class path)
        jar.write_bytes(b"v" * version)
        os.utime(jar, (version, version))
        trainer = class_data.prepare(env, "local[2]", {}, [str(jar)], background=False)
        assert trainer.training and trainer.archive not in archives
        trainer.partial.write_bytes(b"archive")
        trainer.finish(0)
        made = time.time() - 100 + version
        os.utime(trainer.archive, (made, made))
        archives.append(trainer.archive)
    assert sorted(Path(env[class_data.DIR_ENV_VAR]).iterdir()) == sorted(archives[-3:])
    jar.write_bytes(b"vv")  # back to the second: its archive is still there
    os.utime(jar, (2, 2))
    assert class_data.prepare(env, "local[2]", {}, [str(jar)], background=False).archive == archives[1]


def test_a_training_run_that_exits_with_1_and_no_archive_stops_training_for_a_day(env):
    trainer = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    trainer.finish(class_data.DUMP_FAILED)  # the JDK refused to dump: the job's exit code is 1
    assert class_data.prepare(env, "local[2]", {}, JARS, background=False) == class_data.ClassData()
    failed = trainer.archive.with_suffix(".failed")
    day_ago = time.time() - class_data.FAILED_SECONDS - 1
    os.utime(failed, (day_ago, day_ago))
    assert class_data.prepare(env, "local[2]", {}, JARS, background=False).training


@pytest.mark.parametrize("returncode", [-9, 137, 3])
def test_a_killed_or_terminally_failed_training_run_leaves_the_next_launch_to_train(env, returncode):
    trainer = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    trainer.finish(returncode)
    again = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    assert again.training and again.archive == trainer.archive


def test_the_lock_of_a_trainer_that_died_without_finishing_is_taken_over_after_an_hour(env):
    dead = class_data.prepare(env, "local[2]", {}, JARS, background=False)
    assert class_data.prepare(env, "local[2]", {}, JARS, background=False) == class_data.ClassData()
    lock = dead.archive.with_suffix(".training")
    hour_ago = time.time() - class_data.STALE_LOCK_SECONDS - 1
    os.utime(lock, (hour_ago, hour_ago))
    assert class_data.prepare(env, "local[2]", {}, JARS, background=False).training


def test_a_launch_that_must_not_train_does_not_and_the_question_is_asked_only_without_an_archive(env):
    asked = []

    def creates_its_table():  # a caller's reason not to train (the benchmark's baselines, say)
        asked.append(1)
        return False

    assert class_data.prepare(env, "local[2]", {}, JARS, train=creates_its_table,
                              background=False) == class_data.ClassData()
    trainer = class_data.prepare(env, "local[2]", {}, JARS, train=lambda: True, background=False)
    trainer.partial.write_bytes(b"archive")
    trainer.finish(0)
    assert class_data.prepare(env, "local[2]", {}, JARS, train=creates_its_table,
                              background=False).archive == trainer.archive
    assert len(asked) == 1


def test_a_launch_without_an_archive_starts_the_trainer_detached_and_runs_without_waiting(env, monkeypatch):
    started = []

    class Popen:
        def __init__(self, command, **options):
            started.append((command, options))
            self.pid = 4242

    monkeypatch.setattr(class_data.subprocess, "Popen", Popen)
    launch = class_data.prepare(env, "local[2]", {}, JARS)
    assert launch == class_data.ClassData()  # this job: no CDS options, nothing to finish, no wait
    [(command, options)] = started
    archive = Path(env[class_data.DIR_ENV_VAR]) / f"spark-{class_data.archive_key(env, JARS)}.jsa"
    assert command[1:5] == ["-m", "tidemark_spark.class_data_train", "--archive", str(archive)]
    assert command[-2:] == ["--jars", ",".join(JARS)] and command[6].endswith(".partial")
    assert options["start_new_session"] and options["env"] == env  # it outlives the task's process group
    assert archive.with_suffix(".training").exists() and archive.with_suffix(".training.log").exists()
    assert class_data.prepare(env, "local[2]", {}, JARS) == class_data.ClassData() and len(started) == 1  # one


def test_a_trainer_that_cannot_start_releases_the_lock(env, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(class_data.subprocess, "Popen", refuse)
    assert class_data.prepare(env, "local[2]", {}, JARS) == class_data.ClassData()
    assert not list(Path(env[class_data.DIR_ENV_VAR]).glob("*.training"))
