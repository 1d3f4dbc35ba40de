"""Class-data sharing for the ingest job's JVM (tidemark_spark.class_data), through `tidemark run` on
spark-submit as a user runs it (Tidemark's own Spark configuration, not `make test`'s archive): a
pipeline's first batch (creating its table) writes no archive, the host's first job appending to an
existing table writes it as its JVM exits, the next job's JVM maps it, and every batch lands exactly once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests import helpers

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


def run_watching_maps(env: dict, pipeline: str, archive_dir: Path, log: Path
                      ) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`tidemark run` as a real process (its output to ``log``: a pipe nobody reads while it runs would fill
    and block it); also the class-data archives any JVM of its process tree mapped."""
    mapped: set[str] = set()
    with log.open("w") as out, subprocess.Popen([TIDEMARK, "run", pipeline], env=env, text=True, stdout=out,
                                                stderr=subprocess.STDOUT) as process:
        root = psutil.Process(process.pid)
        deadline = time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline:
            try:
                jvms = [p for p in root.children(recursive=True) if p.name() == "java"]
                for jvm in jvms:
                    mapped |= {m.path for m in jvm.memory_maps() if m.path.startswith(str(archive_dir))}
            except psutil.Error:
                pass  # a process ended between the listing and the look
            time.sleep(0.2)
        process.wait(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), ""), mapped


def test_the_first_job_appending_to_a_table_writes_the_class_data_archive_and_the_next_maps_it(kafka_bootstrap,
                                                                                                tmp_path):
    topic = helpers.create_topic(helpers.unique("cds"), partitions=2)
    pipelines, lake, archives = tmp_path / "pipelines", tmp_path / "lake", tmp_path / "cds"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    env = helpers.service_env(pipelines, lake, TIDEMARK_CDS_DIR=str(archives))
    for own in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR"):  # make test's archive and folder: a user has neither
        env.pop(own, None)

    helpers.produce(topic, 30)
    creating, mapped = run_watching_maps(env, topic, archives, tmp_path / "first.log")
    assert creating.returncode == 0, creating.stdout[-3000:]
    assert not mapped and not archives.exists()  # a pipeline's first batch, creating its table, writes none

    helpers.produce(topic, 20, start=30)
    training, mapped = run_watching_maps(env, topic, archives, tmp_path / "second.log")
    assert training.returncode == 0, training.stdout[-3000:]
    written = sorted(archives.glob("spark-*.jsa"))
    assert len(written) == 1 and written[0].stat().st_size > 10_000_000, sorted(archives.iterdir())
    assert sorted(p.name for p in archives.iterdir()) == [written[0].name]  # no lock or partial dump left
    assert not mapped  # it wrote the archive, it could not map it
    assert topic.encode() not in written[0].read_bytes()  # class metadata, not the job's data

    helpers.produce(topic, 10, start=50)
    using, mapped = run_watching_maps(env, topic, archives, tmp_path / "third.log")
    assert using.returncode == 0, using.stdout[-3000:]
    assert mapped == {str(written[0])}, "the third job's JVM did not map the archive"
    assert "INFO SubscriptionState" not in using.stdout  # Tidemark's logging configuration still applies

    table = str(lake / topic)
    row = helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || ':' || kafka_offset) AS d, "
                               "MAX(ingest_batch_id) AS b FROM t")[0]
    assert (row["n"], row["d"], row["b"]) == (60, 60, 3)
