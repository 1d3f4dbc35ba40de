"""Launching the ingest job outside Airflow (``tidemark run``, tests, the soak): the same
spark-submit command the Airflow operator builds, from plain values."""

from __future__ import annotations

import hashlib
import os
import py_compile
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import SECRET_OPTIONS
from tidemark.run import PipelineRun
from tidemark.settings import spark_jars
from tidemark.storage import ObjectStore
from tidemark_spark import class_data

_CHECKOUT = Path(__file__).resolve().parents[2]
_CHECKOUT_SCRIPT = _CHECKOUT / "spark_jobs" / "ingest.py"
INGEST_SCRIPT = str(_CHECKOUT_SCRIPT if _CHECKOUT_SCRIPT.is_file() and (_CHECKOUT / "pyproject.toml").is_file()
                    else Path(__file__).resolve().parent / "ingest_job.py")
"""The job script spark-submit runs: the repository's ``spark_jobs/ingest.py`` in a checkout (and in the
Docker image), else, in a wheel install that has no ``spark_jobs/``, the installed module beside this one.
Either runs ``tidemark_spark.ingest_job.run_and_exit``."""
DEFAULT_CONF = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                # Kafka credentials travel as reader options only (kafka.sasl.jaas.config): should a
                # configuration or a plan description ever show one, Spark redacts it. (The job sets
                # the options' pattern in its session too: spark_io.redact_reader_options.)
                "spark.redaction.regex": "(?i)secret|password|token|access[.]?key|jaas",
                "spark.sql.redaction.options.regex": SECRET_OPTIONS}


SPARK_CONF_DIR = str(Path(__file__).resolve().parent / "conf")
"""Tidemark's Spark configuration: its log4j2.properties keeps the Kafka client's per-seek INFO lines out
of the job's output (and so out of the Airflow task log). The job gets it as a system property; the
job's own SPARK_CONF_DIR is an empty folder (``empty_conf_dir``), which lets its JVM share class data
(``tidemark_spark.class_data``): the JDK cannot archive a class path that holds a non-empty folder."""
LOG4J_CONFIG = str(Path(SPARK_CONF_DIR) / "log4j2.properties")


def empty_conf_dir() -> str:
    """The job's SPARK_CONF_DIR when the caller sets none: an empty folder (Spark's defaults)."""
    path = Path(tempfile.gettempdir()) / "tidemark-spark-conf"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def local_spark_env() -> dict[str, str]:
    """Environment for spark-submit from this virtualenv: the pip-installed Spark as SPARK_HOME,
    this interpreter for the driver and Python workers, and, unless SPARK_CONF_DIR is already set
    (then the caller's logging and spark-defaults apply), an empty configuration folder with
    Tidemark's logging configuration added to spark-submit's JVM options."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    spark_home = os.path.dirname(spec.origin) if spec and spec.origin else ""
    env = {"SPARK_HOME": os.environ.get("SPARK_HOME", spark_home), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    if os.environ.get("SPARK_CONF_DIR"):
        return {**env, "SPARK_CONF_DIR": os.environ["SPARK_CONF_DIR"]}
    given = os.environ.get("SPARK_SUBMIT_OPTS", "").strip()
    return {**env, "SPARK_CONF_DIR": empty_conf_dir(),
            "SPARK_SUBMIT_OPTS": f"{given} -Dlog4j2.configurationFile={LOG4J_CONFIG}".strip()}


def core_archive() -> str:
    """The ``tidemark`` core (with its subpackages) and the job's own package ``tidemark_spark`` as a zip
    for ``--py-files``, so executors on other machines (a standalone cluster, YARN, Kubernetes) import the
    same core as the driver, and a driver that runs elsewhere (cluster deploy mode) finds the job that
    ``spark_jobs/ingest.py`` calls. Named by the hash of its content, built once per version of the code."""
    import tidemark
    import tidemark_spark

    sources, names = [], []
    for package in (Path(tidemark.__file__).resolve().parent, Path(tidemark_spark.__file__).resolve().parent):
        for source in sorted(package.rglob("*.py")):
            sources.append(source)
            names.append(f"{package.name}/{source.relative_to(package).as_posix()}")
    digest = hashlib.sha256(b"".join(n.encode() + p.read_bytes() for n, p in zip(names, sources, strict=True))
                            ).hexdigest()[:16]
    target = (Path(tempfile.gettempdir()) / "tidemark-py-files"
              / f"tidemark-{digest}-{sys.implementation.cache_tag}.zip")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive, \
                tempfile.TemporaryDirectory(prefix="tidemark-pyc-") as scratch:
            for name, source in zip(names, sources, strict=True):
                archive.write(source, name)
                archive.write(_bytecode(source, f"{target}/{name}", Path(scratch) / "module.pyc"), f"{name}c")
        partial.replace(target)  # atomic: concurrent builders write the same bytes
    return str(target)


def _bytecode(source: Path, shown_as: str, scratch: Path) -> Path:
    """``source`` compiled for the archive: Python imports a module from a zip without writing bytecode
    anywhere, so without a ``.pyc`` beside each ``.py`` every job compiled the whole core again (1.3 of the
    driver's 4.9 CPU-seconds, measured). The hash-checked form is used only while it matches its source in
    the archive; an interpreter of another version (an executor's) ignores it and compiles the source, and
    tracebacks still show the source lines (``shown_as``: where the source is in the archive)."""
    py_compile.compile(str(source), cfile=str(scratch), dfile=shown_as, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    return scratch


def job_arguments(plan: BatchPlan) -> list[str]:
    """The ingest script's arguments, whichever launcher runs it: the plan, which holds everything that shapes
    the batch's output (its isolation level included)."""
    return ["--plan", plan.to_json()]


def spark_submit_command(plan: BatchPlan, master: str, conf: Mapping[str, str] | None = None,
                         driver_memory: str = "1g") -> list[str]:
    spark_submit = str(Path(local_spark_env()["SPARK_HOME"]) / "bin" / "spark-submit")
    command = [spark_submit, "--master", master, "--driver-memory", driver_memory, "--name",
               f"tidemark-{plan.pipeline}", "--jars", ",".join(spark_jars()), "--py-files", core_archive()]
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    return command + [INGEST_SCRIPT, *job_arguments(plan)]


def is_spark_connect(master: str) -> bool:
    """A Spark Connect URL (``sc://host:port``): the warm path, no spark-submit."""
    return master.startswith("sc://")


def connect_command(plan: BatchPlan) -> list[str]:
    """The ingest job on the warm path: this interpreter runs the same script as a Spark Connect
    client (the URL travels in TIDEMARK_SPARK_REMOTE: it may hold a token)."""
    return [sys.executable, INGEST_SCRIPT, *job_arguments(plan)]


def job_environment(master: str, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's environment: this process's, the local Spark set-up, ``extra_env`` (the run's
    ``job_environment``: the path of its settings file) and, on the warm path, the Spark Connect URL."""
    from tidemark_spark.ingest_job import REMOTE_ENV_VAR

    env = {**os.environ, **local_spark_env(), **(extra_env or {})}
    env.pop(REMOTE_ENV_VAR, None)
    if is_spark_connect(master):
        env[REMOTE_ENV_VAR] = master
    return env


def run_ingest_job(plan: BatchPlan, master: str, conf: Mapping[str, str] | None = None,
                   extra_env: Mapping[str, str] | None = None, store: ObjectStore | None = None) -> int:
    """Run the ingest job to completion; its output streams to this process's stdout/stderr. A Spark
    Connect master (``sc://...``) runs the job as a client of that server (``conf`` is the server's
    then). ``store``: the object store of a lake on S3. Returns its exit code (``JobExit``)."""
    env = job_environment(master, extra_env)
    if is_spark_connect(master):
        return subprocess.call(connect_command(plan), env=env)
    return call_spark_submit(spark_submit_command(plan, master, conf), env, master, conf)


def call_spark_submit(command: list[str], env: Mapping[str, str], master: str,
                      conf: Mapping[str, str] | None = None, train: bool | Callable[[], bool] = True,
                      stdout=None) -> int:
    """Run a spark-submit command to completion with the class-data sharing of its driver JVM
    (``class_data``: map the host's archive, or, if there is none and ``train``, start its trainer). Returns its
    exit code. ``stdout``: where the job's output goes (``subprocess``'s meaning; default this process's)."""
    sharing = class_data.prepare(env, master, conf or {}, spark_jars(), train=train)
    code = subprocess.call(command, env=sharing.environment(env), stdout=stdout)
    sharing.finish(code)
    return code


def launch(run: PipelineRun, plan: BatchPlan) -> int:
    """Run a pipeline's frozen batch with its Spark connection's master (``tidemark run``, the
    benchmark): spark-submit, or the warm path, in client deploy mode (the driver on this host reads the
    run's settings file). Returns the job's exit code (``JobExit``)."""
    with run.job_environment() as env:
        return run_ingest_job(plan, run.spark_master, run.config.spark_conf, env, run.store)


def launch_job(run: PipelineRun, script: str, arguments: list[str], name: str, stdout=None) -> int:
    """Run a job script beside the ingest job (``tidemark dead-letters reprocess``, the audit's sample) on the
    pipeline's Spark master, as ``tidemark run`` runs the ingest job: a client of the Spark Connect server, or
    spark-submit in client mode with the cached jars, the core's archive and the pipeline's Spark settings.
    Returns its exit code; ``stdout``: where its output goes (``subprocess``'s meaning)."""
    master = run.spark_master
    with run.job_environment() as extra:
        env = job_environment(master, extra)
        if is_spark_connect(master):
            return subprocess.call([sys.executable, script, *arguments], env=env, stdout=stdout)
        command = [str(Path(local_spark_env()["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", master,
                   "--name", name, "--jars", ",".join(spark_jars()), "--py-files", core_archive()]
        for key, value in {**DEFAULT_CONF, **run.config.spark_conf}.items():
            command += ["--conf", f"{key}={value}"]
        return call_spark_submit([*command, script, *arguments], env, master, run.config.spark_conf, stdout=stdout)
