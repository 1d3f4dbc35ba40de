"""Class-data sharing for the ingest job's JVM (tidemark_spark.class_data), through `tidemark run` on
spark-submit as a user runs it (Tidemark's own Spark configuration, not `make test`'s archive): the host's
first job finds no archive, starts the trainer (tidemark_spark.class_data_train) in a process of its own and
ends without waiting for it, the next job's JVM maps the archive, and every batch lands exactly once.

"Without waiting" is read from the processes, not from the clock (a trainer can finish before the job that
started it): the trainer runs in a session of its own, and no JVM of the job dumps an archive
(``-XX:ArchiveClassesAtExit``, the part of a training JVM's exit that takes seconds)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests import helpers

pytestmark = pytest.mark.integration

TIDEMARK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "tidemark")


@dataclass
class Watched:
    """What the process tree of one `tidemark run` showed while it ran."""

    mapped: set[str] = field(default_factory=set)
    """The class-data archives any JVM of the job mapped."""
    job_jvms: dict[int, str] = field(default_factory=dict)
    """The job's JVMs (pid: command line), the trainer's left out."""
    trainer_sessions: set[bool] = field(default_factory=set)
    """For each trainer process seen: whether it ran in the run's own session."""
    trainer_nice: dict[int, int] = field(default_factory=dict)
    """Each trainer process's highest niceness seen (pid: nice)."""


def run_watching_maps(env: dict, pipeline: str, archive_dir: Path, log: Path
                      ) -> tuple[subprocess.CompletedProcess, Watched]:
    """`tidemark run` as a real process (its output to ``log``: a pipe nobody reads while it runs would fill
    and block it), and what its process tree showed (``Watched``)."""
    seen = Watched()
    with log.open("w") as out, subprocess.Popen([TIDEMARK, "run", pipeline], env=env, text=True, stdout=out,
                                                stderr=subprocess.STDOUT) as process:
        root = psutil.Process(process.pid)
        session = os.getsid(process.pid)
        deadline = time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline:
            for child in root.children(recursive=True):
                try:
                    command = " ".join(child.cmdline())
                    if "class_data_train" in command or "class-data-training" in command:
                        seen.trainer_sessions.add(os.getsid(child.pid) == session)
                        seen.trainer_nice[child.pid] = max(child.nice(), seen.trainer_nice.get(child.pid, -20))
                    elif child.name() == "java":
                        seen.job_jvms[child.pid] = command
                        seen.mapped |= _mapped_from(child.pid, str(archive_dir))
                except (psutil.Error, OSError):
                    pass  # a process ended between the listing and the look
            time.sleep(0.2)
        process.wait(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), ""), seen


def _mapped_from(pid: int, folder: str) -> set[str]:
    """The files under ``folder`` that process ``pid`` maps, from /proc/PID/maps (psutil's memory_maps reads
    smaps, whose page-table walk cost about 30 ms of kernel time per look at a JVM, five looks a second)."""
    with open(f"/proc/{pid}/maps") as maps:  # address, perms, offset, device, inode, then the file, if any
        paths = {fields[5] for fields in (line.split(maxsplit=5) for line in maps) if len(fields) == 6}
    return {path.strip() for path in paths if path.startswith(folder)}


def test_the_first_job_starts_the_trainer_without_waiting_for_it_and_the_next_maps_the_archive(kafka_bootstrap,
                                                                                                 tmp_path):
    topic = helpers.create_topic(helpers.unique("cds"), partitions=2)
    pipelines, lake, archives = tmp_path / "pipelines", tmp_path / "lake", tmp_path / "cds"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    env = helpers.service_env(pipelines, lake, TIDEMARK_CDS_DIR=str(archives))
    for own in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR"):  # make test's archive and folder: a user has neither
        env.pop(own, None)

    helpers.produce(topic, 30)
    first, seen = run_watching_maps(env, topic, archives, tmp_path / "first.log")
    assert first.returncode == 0, first.stdout[-3000:]
    assert not seen.mapped and list(archives.glob("*.training.log")), \
        sorted(archives.iterdir()) if archives.exists() else []
    # No wait: the trainer ran detached (a session of its own), and no JVM of the job dumped an archive.
    assert seen.trainer_sessions == {False}, seen
    # ... at a lower CPU priority than the job's (the processes live a minute: each is seen after its start)
    assert seen.trainer_nice and min(seen.trainer_nice.values()) >= min(os.nice(0) + 10, 19), seen.trainer_nice
    assert seen.job_jvms and not [c for c in seen.job_jvms.values() if "ArchiveClassesAtExit" in c], seen.job_jvms
    written = helpers.wait_until(lambda: sorted(archives.glob("spark-*.jsa")), 300,
                                 lambda: f"the trainer's archive; its log: {_training_log(archives)}")
    assert len(written) == 1 and written[0].stat().st_size > 10_000_000, sorted(archives.iterdir())
    helpers.wait_until(lambda: not list(archives.glob("*.training")), 30, "the trainer to release its lock")
    training = sorted(archives.glob("*.training.log"))[0].read_text()
    assert "Traceback" not in training, training[-3000:]  # every step of the training job ran, its classes archived
    assert sorted(p.name for p in archives.iterdir() if not p.name.endswith(".log")) == [written[0].name]
    assert topic.encode() not in written[0].read_bytes()  # class metadata, not the job's data

    helpers.produce(topic, 20, start=30)
    using, seen = run_watching_maps(env, topic, archives, tmp_path / "second.log")
    assert using.returncode == 0, using.stdout[-3000:]
    assert seen.mapped == {str(written[0])}, "the second job's JVM did not map the archive"
    assert not seen.trainer_sessions, "the second job started a trainer"
    assert "INFO SubscriptionState" not in using.stdout  # Tidemark's logging configuration still applies

    table = str(lake / topic)
    row = helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT kafka_partition || ':' || kafka_offset) AS d, "
                               "MAX(ingest_batch_id) AS b FROM t")[0]
    assert (row["n"], row["d"], row["b"]) == (50, 50, 2)


def _training_log(archives: Path) -> str:
    logs = sorted(archives.glob("*.training.log"))
    return logs[0].read_text()[-3000:] if logs else "(none)"
