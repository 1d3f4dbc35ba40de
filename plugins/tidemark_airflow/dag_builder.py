"""One ingest DAG per pipeline, two tasks: plan -> ingest (Spark). The plan task skips the ingest task
when there is nothing to read (no Spark launch); the success callback of the task that ends the run
reports (offsets mirrored to the consumer group, lag logged, metrics sent). The ingest task's outlet
is the output table (an Airflow Asset: one event per committed batch).
Declarative: building a DAG reads nothing but the pipeline config (no Kafka, Delta or Spark)."""

from __future__ import annotations

import datetime as dt

from tidemark.config.pipeline import PipelineConfig
from tidemark.kafka.reset_targets import SCENARIOS
from tidemark_airflow.naming import audit_dag_id, ingest_dag_id, maintenance_dag_id, replay_dag_id

DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def doc_md(config: PipelineConfig) -> str:
    """The DAG's documentation, rendered from the pipeline."""
    facts = [("topics", config.topics_label), ("table", f"`{config.table_uri}`"),
             ("Kafka connection", f"`{config.kafka_conn_id}`"), ("Spark connection", f"`{config.spark_conn_id}`"),
             ("start (new partitions)", config.starting_offsets), ("on data loss", config.on_data_loss),
             ("isolation", config.isolation_level),
             ("partitioned by", ", ".join(config.partition_by) or "none"),
             ("max offsets per run", config.max_offsets_per_run or "no cap")]
    table = "\n".join(f"| {k} | {v} |" for k, v in facts)
    return f"### Tidemark pipeline `{config.name}`\n\n{config.description}\n\n| | |\n|---|---|\n{table}\n"


def trigger_form():
    """The manual-run form (Airflow Params, validated with JSON schema)."""
    from airflow.sdk import Param

    from tidemark_airflow.run_modes import MODES

    return {
        "mode": Param("incremental", type="string", enum=list(MODES), title="Run mode",
                      description="incremental: from the committed offsets to the latest (the default). "
                                  "capped: the same, at most 'max_records' offsets. backfill_window: re-ingest "
                                  "the records of a time window. backfill_offsets: re-ingest explicit offsets. "
                                  "Backfills are deduplicated and never move the committed offsets."),
        "max_records": Param(None, type=["null", "integer"], minimum=1, title="Max records (capped run)"),
        "window_start": Param(None, type=["null", "string"], format="date-time",
                              title="Window start (backfill_window)",
                              description="ISO-8601 with its zone, 2026-11-01T00:00:00Z"),
        "window_end": Param(None, type=["null", "string"], format="date-time", title="Window end (backfill_window)",
                            description="exclusive; ISO-8601 with its zone, 2026-11-02T00:00:00Z"),
        "on_empty_window": Param("skip", type="string", enum=["skip", "fail"], title="A partition with no records "
                                 "in the window", description="skip it, or fail the run"),
        "offsets": Param(None, type=["null", "array"], title="Offsets (backfill_offsets)",
                         description='[{"topic": "orders", "partition": 0, "start": 100, "end": 200}] (end exclusive)',
                         items={"type": "object", "additionalProperties": False,
                                "required": ["topic", "partition", "start", "end"],
                                "properties": {"topic": {"type": "string", "minLength": 1},
                                               "partition": {"type": "integer", "minimum": 0},
                                               "start": {"type": "integer", "minimum": 0},
                                               "end": {"type": "integer", "minimum": 0}}}),
    }


def timetable(schedule: str | None):
    """Cron schedules with real data intervals, so Airflow's native backfill has windows to map."""
    if schedule is None:
        return None
    from airflow.sdk import CronDataIntervalTimetable

    return CronDataIntervalTimetable(schedule, timezone="UTC")


def build_ingest_dag(config: PipelineConfig):
    from airflow.providers.standard.operators.python import ShortCircuitOperator
    from airflow.sdk import DAG

    from tidemark_airflow import tasks
    from tidemark_airflow.alerts import freshness_deadline
    from tidemark_airflow.assets import table_asset
    from tidemark_airflow.operators import TidemarkIngestOperator
    from tidemark_spark.submit import DEFAULT_CONF

    default_args = {"retries": config.retries, "retry_delay": dt.timedelta(seconds=config.retry_delay_seconds),
                    "retry_exponential_backoff": True,
                    "max_retry_delay": dt.timedelta(minutes=10)}
    with DAG(dag_id=ingest_dag_id(config.name), schedule=timetable(config.schedule), start_date=DEFAULT_START,
             catchup=False, params=trigger_form(),
             max_active_runs=1, default_args=default_args, doc_md=doc_md(config),
             deadline=freshness_deadline(config),  # freshness_sla: a Deadline Alert (tidemark_airflow.alerts)
             tags=["tidemark", f"pipeline:{config.name}"], description=f"Kafka -> Delta: {config.name}") as dag:
        # Two tasks, since each task launch costs a process start and a DAG parse: the plan task also
        # decides (an empty plan skips the ingest task). The report (offsets mirrored to the consumer
        # group, lag logged) and the metrics run in the success callbacks, after Airflow has recorded
        # the task's success, so the run ends as its work is done: the ingest task's after its commit,
        # the plan task's after an empty plan (tidemark_airflow.tasks).
        plan = ShortCircuitOperator(task_id="plan", python_callable=tasks.plan, op_kwargs={"pipeline": config.name},
                                    ignore_downstream_trigger_rules=False, on_success_callback=tasks.after_plan)
        ingest = TidemarkIngestOperator(
            task_id="ingest", conn_id=config.spark_conn_id, conf={**DEFAULT_CONF, **config.spark_conf},
            driver_memory="1g", name=f"tidemark-{config.name}", outlets=[table_asset(config)],
            on_success_callback=tasks.after_ingest)  # the report, metrics and hold warnings
        plan >> ingest
    return dag


def replay_form():
    """The replay DAG's form: kafka-consumer-groups' reset vocabulary, dry run by default."""
    from airflow.sdk import Param

    return {
        "scenario": Param("to-earliest", type="string", enum=list(SCENARIOS), title="Reset",
                          description="to-earliest, to-latest, to-offset (offset), shift-by (shift), to-datetime "
                                      "(datetime), by-duration (duration), from-file (offsets_file)"),
        "scope": Param([], type="array", items={"type": "string", "minLength": 1}, title="Scope",
                       description="empty: every partition; 'orders': one topic; 'orders:0,2': some partitions"),
        "offset": Param(None, type=["null", "integer"], minimum=0, title="Offset (to-offset)"),
        "shift": Param(None, type=["null", "integer"], title="Shift by (shift-by; negative goes back)"),
        "datetime": Param(None, type=["null", "string"], title="Date-time (to-datetime)",
                          description="ISO-8601, UTC if no zone"),
        "duration": Param(None, type=["null", "string"], title="Duration (by-duration)",
                          description="ISO-8601 duration back from now: PT30M, PT2H, P1D"),
        "offsets_file": Param(None, type=["null", "string"], title="Offsets (from-file)",
                              description="CSV lines topic,partition,offset"),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="on: show what would change and change nothing"),
        "reason": Param("", type="string", title="Reason",
                        description="why; written to the ledger (required to apply)"),
    }


def build_replay_dag(config: PipelineConfig):
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from tidemark_airflow import tasks

    with DAG(dag_id=replay_dag_id(config.name), schedule=None, start_date=DEFAULT_START, catchup=False,
             max_active_runs=1, params=replay_form(), tags=["tidemark", "replay", f"pipeline:{config.name}"],
             description=f"Reset the committed offsets of {config.name}",
             doc_md=f"### Replay `{config.name}`\n\nMove the pipeline's committed offsets with the vocabulary of "
                    f"`kafka-consumer-groups --reset-offsets`. **Dry run by default.** An applied reset is an "
                    f"audited `reset` row in the ledger; re-read records are deduplicated on their Kafka "
                    f"coordinates.\n\n" + doc_md(config)) as dag:
        PythonOperator(task_id="reset", python_callable=tasks.reset, op_kwargs={"pipeline": config.name},
                       retries=0)
    return dag


def build_maintenance_dag(config: PipelineConfig):
    """One task, ``maintain``, every ``maintenance.optimize_every``: a DAG of its own rather than a task of the
    ingest DAG, so that maintenance never delays or fails an ingest run (docs/DESIGN.md, *Table maintenance*)."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from tidemark_airflow import tasks

    settings = config.maintenance
    if settings is None:
        raise ValueError(f"pipeline '{config.name}' has no 'maintenance:'; it gets no maintenance DAG")
    steps = ["OPTIMIZE" + (f" Z-ordered by {', '.join(settings.zorder_by)}" if settings.zorder_by else " (compaction)")]
    if settings.vacuum_retain is not None:
        steps.append(f"VACUUM retaining {settings.vacuum_retain}")
    steps.append("log checkpoints of the output, the dead letters and the ledger")
    with DAG(dag_id=maintenance_dag_id(config.name), schedule=settings.optimize_every, start_date=DEFAULT_START,
             catchup=False, max_active_runs=1, tags=["tidemark", "maintenance", f"pipeline:{config.name}"],
             default_args={"retries": config.retries, "retry_delay": dt.timedelta(seconds=config.retry_delay_seconds),
                           "retry_exponential_backoff": True, "max_retry_delay": dt.timedelta(minutes=10)},
             description=f"Table maintenance of {config.name}",
             doc_md=f"### Maintenance of `{config.name}`\n\nEvery {settings.optimize_every}: " + "; ".join(steps)
                    + ". Safe while the ingest DAG commits batches.\n\n" + doc_md(config)) as dag:
        PythonOperator(task_id="maintain", python_callable=tasks.maintain, op_kwargs={"pipeline": config.name})
    return dag


def build_audit_dag(config: PipelineConfig):
    """One task, ``audit``, every ``audit.every``: the output checked against the ledger (and a sample read again
    from Kafka); a DAG of its own, so an audit never delays an ingest run. Damage fails the run, without retries."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from tidemark_airflow import tasks

    settings = config.audit
    if settings is None:
        raise ValueError(f"pipeline '{config.name}' has no 'audit:'; it gets no audit DAG")
    samples = 0 if config.transform is not None else settings.verify_sample  # a transform's output: not Kafka's
    sample = f", and {samples} retained ranges read again from Kafka" if samples else ""
    with DAG(dag_id=audit_dag_id(config.name), schedule=settings.every, start_date=DEFAULT_START, catchup=False,
             max_active_runs=1, tags=["tidemark", "audit", f"pipeline:{config.name}"],
             description=f"Audit of {config.name}: the output against the ledger",
             doc_md=f"### Audit of `{config.name}`\n\nEvery {settings.every}: `tidemark audit {config.name}` (every "
                    f"committed offset in the output exactly once{sample}). Damage fails the run.\n\n"
                    + doc_md(config)) as dag:
        PythonOperator(task_id="audit", python_callable=tasks.audit, retries=1,
                       op_kwargs={"pipeline": config.name, "verify_sample": samples})
    return dag
