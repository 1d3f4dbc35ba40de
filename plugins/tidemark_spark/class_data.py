"""Class-data sharing (AppCDS) for the ingest job's driver JVM.

A spark-submit JVM spends seconds of every job loading, parsing and verifying the same tens of
thousands of Spark, Scala, Delta and Kafka classes. The first launch on a host (for a given JDK, Spark,
jars and configuration folder) that finds no archive starts a trainer (``class_data_train``) in a
process of its own, which outlives the job: a short Spark job on the same class path whose JVM dumps
the classes it loaded into an archive as it exits (``-XX:ArchiveClassesAtExit``); the launch itself runs
without one, so no task waits for the dump (about 25 s of a JVM's exit). Every later job maps the
archive (``-XX:SharedArchiveFile``). Measured on 2 cores (docs/BENCHMARKS.md): a 10,000-record batch
15.2 s -> 11.2 s, a 2M-record one 24.5 s -> 18.8 s. The JVM checks an archive against its own class
path and JDK and ignores one that does not match, so a stale archive costs the gain, never the job.
``python -m tidemark_spark.class_data_train --now`` trains in the foreground (``make setup`` does not:
the first job starts it).

The JDK makes a JVM that dumps an archive *fail at exit* when a non-empty folder is on its class
path, so an archive is trained and used only where Tidemark knows the whole class path: a ``local`` or
standalone (``spark://``) master, an empty ``SPARK_CONF_DIR`` (Tidemark's own default; its logging
configuration is passed as a system property instead), no Hadoop or YARN configuration folder, no
extra class path; and the caller has not chosen its own CDS options. Elsewhere the job runs as
before. One process at a time trains (a lock file); a training run that exits with 1 (a failed dump)
and leaves no archive stops training for a day (``.failed``).

``TIDEMARK_CDS_DIR`` is where the archives are kept (default: ``<temp dir>/tidemark-cds``; an
archive is about 200 MB, one per class path, the newest ``KEPT_ARCHIVES`` kept; the trainer's output in
``spark-<key>.training.log``); ``TIDEMARK_CDS_DIR=off`` turns this off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DIR_ENV_VAR = "TIDEMARK_CDS_DIR"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot map the archive (another class path, another JDK) runs without it, silently."""
CALLERS_OWN = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "AutoCreateSharedArchive")
"""JVM options that mean the caller manages class-data sharing itself (e.g. `make test`'s archive)."""
FOREIGN_CLASS_PATH = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")
"""Variables that put folders Tidemark cannot vouch for on the driver's class path."""
DUMP_FAILED = 1
"""The exit code of a JVM whose dump failed (also the job's own for a retryable failure). A job killed, or
ended on a terminal error, leaves the next job to train."""
KEPT_ARCHIVES = 3
"""The newest archives kept in the folder: the current class path's, and two others (an installation beside
this one, or the version before an upgrade) so that two installations on one host do not take turns
deleting each other's."""
STALE_LOCK_SECONDS = 3600
FAILED_SECONDS = 24 * 3600


def archive_dir(env: Mapping[str, str]) -> Path | None:
    given = env.get(DIR_ENV_VAR, "")
    if given.strip().lower() == "off":
        return None
    return Path(given) if given.strip() else Path(tempfile.gettempdir()) / "tidemark-cds"


def why_not(env: Mapping[str, str], master: str, conf: Mapping[str, str]) -> str | None:
    """Why the driver JVM of a job with this environment, master and Spark configuration cannot train or
    use an archive (None: it can)."""
    if archive_dir(env) is None:
        return f"{DIR_ENV_VAR}=off"
    options = f"{env.get('SPARK_SUBMIT_OPTS', '')} {conf.get('spark.driver.extraJavaOptions', '')}"
    if any(flag in options for flag in CALLERS_OWN):
        return "the caller's JVM options manage class-data sharing"
    if not (master.startswith("local") or master.startswith("spark://")):
        return f"master '{master}' (only local and standalone masters)"
    foreign = [name for name in FOREIGN_CLASS_PATH if env.get(name)]
    if foreign or conf.get("spark.driver.extraClassPath"):
        return f"the driver's class path has folders of {', '.join(foreign) or 'spark.driver.extraClassPath'}"
    conf_dir = env.get("SPARK_CONF_DIR", "")
    if not conf_dir or not Path(conf_dir).is_dir() or any(Path(conf_dir).iterdir()):
        return f"SPARK_CONF_DIR ({conf_dir or 'unset'}) is not an empty folder"
    if not _java(env):
        return "no java found"
    return None


def _java(env: Mapping[str, str]) -> str | None:
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    return os.path.realpath(found) if found and os.path.isfile(found) else None


def archive_key(env: Mapping[str, str], jars: Sequence[str]) -> str:
    """What the archive depends on: the JDK (its binary), Spark, the jars, the configuration folder."""
    java = _java(env) or ""
    parts = [java, str(os.stat(java).st_mtime_ns) if java else "", os.path.realpath(env.get("SPARK_HOME", "")),
             env.get("SPARK_CONF_DIR", "")]
    for jar in jars:
        with contextlib.suppress(OSError):
            stat = os.stat(jar)
            parts.append(f"{os.path.realpath(jar)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ClassData:
    """What one launch does: its JVM options, and (when it trains) where its archive goes."""

    java_options: str = ""
    archive: Path | None = None
    partial: Path | None = None
    """Set when this launch trains: its JVM dumps here; ``finish`` moves it to ``archive``."""

    @property
    def training(self) -> bool:
        return self.partial is not None

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` (spark-submit's whole environment) with this launch's options added to spark-submit's
        JVM options (the driver's, in client mode), after the caller's own."""
        return {**env, **self.added_to(env)}

    def added_to(self, env: Mapping[str, str]) -> dict[str, str]:
        """The variables this launch changes in ``env``: SPARK_SUBMIT_OPTS, or nothing."""
        if not self.java_options:
            return {}
        given = env.get("SPARK_SUBMIT_OPTS", "").strip()
        return {"SPARK_SUBMIT_OPTS": f"{given} {self.java_options}".strip()}

    def finish(self, returncode: int) -> None:
        """After the job: keep a trained archive, or note a training run that left none."""
        if self.partial is None or self.archive is None:
            return
        lock = _lock(self.archive)
        try:
            if self.partial.is_file() and self.partial.stat().st_size > 0:
                os.replace(self.partial, self.archive)  # atomic: a job starting now maps the whole archive
                for old in sorted(self.archive.parent.glob("spark-*.jsa"), key=_age)[KEPT_ARCHIVES:]:
                    old.unlink(missing_ok=True)  # a JVM mapping it keeps its pages
                log.info("class-data archive written: %s (later jobs on this host map it)", self.archive)
            elif returncode == DUMP_FAILED:
                _failed(self.archive).write_text(f"exit {returncode}, no archive\n")
                log.info("the job that was to write the class-data archive %s left none (exit %d); jobs run "
                         "without one for a day", self.archive, returncode)
        finally:
            self.partial.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _lock(archive: Path) -> Path:
    return archive.with_suffix(".training")


def _failed(archive: Path) -> Path:
    return archive.with_suffix(".failed")


def _recent(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except FileNotFoundError:
        return False


def prepare(env: Mapping[str, str], master: str, conf: Mapping[str, str], jars: Sequence[str], *,
            train: bool | Callable[[], bool] = True, background: bool = True) -> ClassData:
    """The class-data sharing of one spark-submit launch with this environment: map the archive when
    there is one; else, if ``train`` (asked only then, when it is a function) and no other process is
    training, start the trainer (``class_data_train``) detached and run this launch without one: no job
    waits for an archive to be written. ``background=False``: the caller trains (the returned ``partial``)."""
    reason = why_not(env, master, conf)
    if reason is not None:
        log.debug("no class-data sharing for the job: %s", reason)
        return ClassData()
    folder = archive_dir(env)
    assert folder is not None
    archive = folder / f"spark-{archive_key(env, jars)}.jsa"
    if archive.is_file():
        log.info("the job's JVM maps the class-data archive %s", archive)
        return ClassData(f"-XX:SharedArchiveFile={archive} {QUIET}", archive)
    if _recent(_failed(archive), FAILED_SECONDS) or not (train() if callable(train) else train):
        return ClassData()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _lock(archive)
        if lock.exists() and not _recent(lock, STALE_LOCK_SECONDS):
            lock.unlink(missing_ok=True)  # its job died without finishing
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as exc:  # another job is training (or the folder is not writable): run without
        log.info("no class-data archive yet for this class path, and none started: %s; this job runs without it",
                 "another process is training it" if _lock(archive).exists() else exc)
        return ClassData()
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    if not background:
        return ClassData("", archive, partial)
    try:
        with open(archive.with_suffix(".training.log"), "w") as out:
            trainer = subprocess.Popen(
                [sys.executable, "-m", "tidemark_spark.class_data_train", "--archive", str(archive), "--partial",
                 str(partial), "--jars", ",".join(jars)], env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    except OSError as exc:
        _lock(archive).unlink(missing_ok=True)
        log.info("the class-data trainer could not start (%s); the job runs without an archive", exc)
        return ClassData()
    log.info("no class-data archive yet for this class path: process %d trains one in the background (about "
             "a minute, once per host and class path); this job runs without it", trainer.pid)
    return ClassData()
