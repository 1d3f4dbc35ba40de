"""The environment every contender runs in (a private lake, pipelines folder and Airflow home under
BENCH_WORK, the broker of scripts/with_broker.sh), and the one place the benchmark wires a Tidemark
run: the pipeline's config, the Kafka properties, the storage, the Schema Registry, the plan call and
the ingest job's launch (spark-submit, or the warm path), whose spark-submit base the Spark
baselines share. The other modules call these functions, never the core's run wiring."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import yaml

from bench.knobs import BIN, ROOT, BenchSettings
from bench.measure import Measurement, check, run_measured
from tidemark import storage
from tidemark.batch.job_settings import KAFKA_ENV_VAR
from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.batch_io import kafka_source_options
from tidemark.config.pipeline import PipelineConfig, find_pipeline
from tidemark.connections import EnvironmentResolver
from tidemark.kafka.offsets import OffsetRange
from tidemark.run import PipelineRun
from tidemark.settings import spark_jars
from tidemark_airflow.naming import ingest_dag_id
from tidemark_spark import class_data
from tidemark_spark.ingest_job import REMOTE_ENV_VAR
from tidemark_spark.submit import (
    INGEST_SCRIPT,
    connect_command,
    local_spark_env,
    spark_submit_command,
)

SUBMIT, WARM = "spark-submit", "spark-connect"
"""The ingest job's launchers: a spark-submit per batch (the default), or a Spark Connect server."""


def configure_environment(settings: BenchSettings) -> None:
    """Point this process (and every child) at the benchmark's own lake, pipelines and Airflow."""
    os.environ.update({
        "TIDEMARK_LAKE_ROOT": str(settings.lake),
        "TIDEMARK_PIPELINES_DIR": str(settings.pipelines),
        "AIRFLOW_HOME": str(settings.airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                  "extra": {"bootstrap.servers": settings.bootstrap}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": settings.master}),
    })
    os.environ.pop("TIDEMARK_LEDGER_URI", None)


def reset_work(settings: BenchSettings) -> None:
    shutil.rmtree(settings.work, ignore_errors=True)
    for folder in (settings.lake, settings.pipelines, settings.airflow_home):
        folder.mkdir(parents=True)


def migrate_airflow() -> None:
    result = subprocess.run([str(BIN / "airflow"), "db", "migrate"], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def kafka_properties(settings: BenchSettings) -> dict[str, str]:
    return {"bootstrap.servers": settings.bootstrap}


def add_pipeline(settings: BenchSettings, name: str, topic: str, **extra) -> PipelineConfig:
    """A pipeline file with the three required keys, manual schedule, no retries, and ``extra`` keys."""
    (settings.pipelines / f"{name}.yaml").write_text(yaml.safe_dump(
        {"name": name, "topics": [topic], "table": name, "schedule": None, "retries": 0, **extra}))
    return find_pipeline(name)


def remove_pipeline(settings: BenchSettings, config: PipelineConfig) -> None:
    """Drop the pipeline's file and output table (the ledger keeps its rows)."""
    (settings.pipelines / f"{config.name}.yaml").unlink(missing_ok=True)
    drop_table(config.table_uri)
    drop_table(config.dead_letter_uri)


def drop_table(uri: str | None) -> None:
    if uri:
        shutil.rmtree(uri, ignore_errors=True)


def spark_env(settings: BenchSettings) -> dict[str, str]:
    """The ingest job's environment (tidemark_spark.submit.run_ingest_job), plus on PYTHONPATH the
    repository (the baseline scripts import bench.jobs) and the core this process imported (the jobs
    run the same code as the plan call)."""
    import tidemark

    core = str(Path(tidemark.__file__).resolve().parents[1])
    env = {**os.environ, **local_spark_env(), "PYTHONPATH": os.pathsep.join([str(ROOT), core]),
           KAFKA_ENV_VAR: json.dumps(kafka_properties(settings))}
    return _class_data(settings, env).environment(env)


def _class_data(settings: BenchSettings, env: dict[str, str]) -> class_data.ClassData:
    """The class-data archive every Spark contender's JVM maps, as `tidemark run` maps it (none yet: none)."""
    return class_data.prepare(env, settings.master, {}, spark_jars(), train=False)


def class_data_archive(settings: BenchSettings) -> Path | None:
    """The class-data archive the benchmark's spark-submit JVMs map (``tidemark_spark.class_data``), if any."""
    return _class_data(settings, {**os.environ, **local_spark_env()}).archive


def train_class_data(settings: BenchSettings) -> None:
    """Before anything is measured: unless it is there already, the class-data archive, trained as `tidemark run`
    has it trained (``tidemark_spark.class_data_train``, here in the foreground), so that no measured run pays
    for the training beside it or runs without the archive."""
    from tidemark_spark import class_data_train

    if class_data_archive(settings) is not None:
        return
    if class_data.why_not({**os.environ, **local_spark_env()}, settings.master, {}) is not None:
        return
    if class_data_train.main(["--now"]) != 0 or class_data_archive(settings) is None:
        raise RuntimeError("the class-data archive was not trained (see the trainer's output above)")


def plan_batch(settings: BenchSettings, config: PipelineConfig, *, expect: int | None = None,
               registry_url: str | None = None, ledger_uri: str | None = None) -> tuple[BatchPlan, float]:
    """The plan call of `tidemark run` (open the pipeline's run: connections from this process's
    AIRFLOW_CONN_* variables; recover, plan, freeze) and its seconds; ``expect``: the offsets the batch
    must hold; ``registry_url``: the Schema Registry of an Avro pipeline."""
    if registry_url:
        os.environ["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"] = json.dumps({"conn_type": "http", "host": registry_url})
    started = time.perf_counter()
    plan = PipelineRun.open(config, EnvironmentResolver(), ledger_uri=ledger_uri).prepare()
    seconds = time.perf_counter() - started
    if expect is not None and plan.total_offsets != expect:
        raise RuntimeError(f"pipeline '{config.name}': Tidemark planned {plan.total_offsets} offsets, "
                           f"expected {expect}")
    return plan, seconds


def ingest_command(settings: BenchSettings, plan: BatchPlan, launcher: str = SUBMIT, connect_url: str | None = None,
                   store: storage.ObjectStore | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run the ingest job of ``plan``, as `tidemark run` launches it."""
    env = spark_env(settings)
    if store is not None:
        env[storage.ENV_VAR] = store.to_json()
    if launcher == WARM:
        return connect_command(plan), {**env, REMOTE_ENV_VAR: connect_url or ""}
    return tidemark_submit(settings, plan), env


def run_ingest(settings: BenchSettings, plan: BatchPlan, what: str, **launch) -> Measurement:
    """Run the ingest job of ``plan`` (``launch``: ``ingest_command``'s options), measured; fails loudly."""
    command, env = ingest_command(settings, plan, **launch)
    if launch.get("launcher", SUBMIT) == WARM:
        return check(run_measured(command, env), what)
    sharing = class_data.prepare(env, settings.master, {}, spark_jars())  # as run_ingest_job does
    measured = run_measured(command, sharing.environment(env))
    sharing.finish(measured.returncode)
    return check(measured, what)


def capped_batch(settings: BenchSettings, name: str, topic: str, size: int, what: str) -> tuple[Measurement, float]:
    """One batch of exactly ``size`` records from the start of ``topic`` (a fresh pipeline NAME capped with
    `max_offsets_per_run`), run as `tidemark run` runs it and counted back; the pipeline is removed
    afterwards. Returns the job's measurement and the plan call's seconds."""
    config = add_pipeline(settings, name, topic, max_offsets_per_run=size)
    plan, plan_seconds = plan_batch(settings, config, expect=size)
    measured = run_ingest(settings, plan, what)
    found = table_count(config.table_uri)
    if found != size:
        raise RuntimeError(f"{config.name}: the output holds {found} rows, expected {size}")
    remove_pipeline(settings, config)
    return measured, plan_seconds


def s3_store(endpoint: str, access_key: str, secret_key: str) -> storage.ObjectStore:
    """The lake on an S3 server: the storage connection this process's runs resolve (the plan call)
    and, through ``ingest_command``, the job's store."""
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({"conn_type": "aws", "login": access_key,
                                                         "password": secret_key, "extra": {"endpoint_url": endpoint}})
    return storage.ObjectStore(access_key, secret_key, endpoint_url=endpoint)


def local_store() -> None:
    os.environ.pop("AIRFLOW_CONN_AWS_DEFAULT", None)


def spark_tasks(settings: BenchSettings, plan: BatchPlan) -> str | None:
    """The Spark tasks the job's Kafka read asks for (``minPartitions``), None: one per partition."""
    return kafka_source_options(plan, kafka_properties(settings)).get("minPartitions")


def dag_id(pipeline: str) -> str:
    return ingest_dag_id(pipeline)


def tidemark_submit(settings: BenchSettings, plan: BatchPlan) -> list[str]:
    """Exactly the command `tidemark run` launches for a batch. With BENCH_EVENT_LOG_DIR set, the job also writes
    Spark's event log there (to compare a fast round with a slow one)."""
    events = os.environ.get("BENCH_EVENT_LOG_DIR")
    conf = None
    if events:
        Path(events).mkdir(parents=True, exist_ok=True)
        conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": Path(events).resolve().as_uri(),
                "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    return spark_submit_command(plan, settings.master, conf=conf, driver_memory=settings.driver_memory)


def spark_submit_base(settings: BenchSettings, name: str) -> list[str]:
    """Tidemark's spark-submit command (master, driver memory, jars, conf) up to the script."""
    probe = BatchPlan("bench", 1, "unused", "unused", [OffsetRange("unused", 0, 0, 1)])
    command = tidemark_submit(settings, probe)
    base = command[:command.index(INGEST_SCRIPT)]
    base[base.index("--name") + 1] = name
    return base


def table_count(uri: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(uri).count()


def task_durations(settings: BenchSettings, dag_id: str, run_id: str) -> dict[str, dict]:
    """Task states and durations (seconds) of one DAG run, from Airflow's SQLite metadata DB."""
    with sqlite3.connect(settings.airflow_home / "airflow.db") as db:
        rows = db.execute("SELECT task_id, state, duration FROM task_instance WHERE dag_id = ? AND run_id = ?",
                          (dag_id, run_id)).fetchall()
    return {task: {"state": state, "seconds": None if seconds is None else round(float(seconds), 3)}
            for task, state, seconds in rows}


def fresh_folder(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


QUIET = ("kafka", "py4j", "deltalake", "tidemark")
"""The libraries a benchmark drives, kept to their errors: the benchmark logs what it measures."""


def log_as(name: str, *also_quiet: str) -> None:
    """A benchmark program's log: its name and the time on every line, the libraries it drives quiet."""
    logging.basicConfig(level=logging.INFO, format=f"[{name} %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    for noisy in (*QUIET, *also_quiet):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def own_settings(key: str, **changes) -> BenchSettings:
    """The settings of a part run as a program of its own: its work folder (``BENCH_<KEY>_WORK``, by default
    .cache/bench-<key>) and ``changes`` over the common knobs."""
    work = Path(os.environ.get(f"BENCH_{key.upper()}_WORK", str(ROOT / ".cache" / f"bench-{key}")))
    return dataclasses.replace(BenchSettings.from_env(), work=work, **changes)


def run_alone(run, result_file: str) -> None:
    """A part of `make bench` run on its own (`make bench-skew`, `bench-scale`, `bench-profile`): a fresh
    work folder, RUN(settings), its results to bench/results/RESULT_FILE and its summary printed."""
    import logging

    from bench.knobs import save_result

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = BenchSettings.from_env()
    reset_work(settings)
    configure_environment(settings)
    out = run(settings)
    save_result(result_file, out)
    print(json.dumps(out["summary"], indent=2))
