"""One ingest DAG per pipeline: plan -> has_new_records -> ingest (Spark) -> report.
Declarative: building a DAG reads nothing but the pipeline config (no Kafka, Delta or Spark)."""

from __future__ import annotations

import datetime as dt

from tidemark.config import PipelineConfig
from tidemark_airflow.run_modes import MODES

DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def doc_md(config: PipelineConfig) -> str:
    """The DAG's documentation, rendered from the pipeline."""
    facts = [("topics", ", ".join(config.topics)), ("table", f"`{config.table_uri}`"),
             ("Kafka connection", f"`{config.kafka_conn_id}`"), ("Spark connection", f"`{config.spark_conn_id}`"),
             ("start (new partitions)", config.starting_offsets), ("on data loss", config.on_data_loss),
             ("isolation", config.isolation_level), ("max records per run", config.max_records_per_run or "no cap")]
    table = "\n".join(f"| {k} | {v} |" for k, v in facts)
    return f"### Tidemark pipeline `{config.name}`\n\n{config.description}\n\n| | |\n|---|---|\n{table}\n"


def trigger_form():
    """The manual-run form (Airflow Params, validated with JSON schema)."""
    from airflow.sdk import Param

    return {
        "mode": Param("incremental", type="string", enum=list(MODES), title="Run mode",
                      description="incremental: from the committed offsets to the latest (the default). "
                                  "capped: the same, at most 'max_records' offsets. backfill_window: re-ingest "
                                  "the records of a time window. backfill_offsets: re-ingest explicit offsets. "
                                  "Backfills are deduplicated and never move the committed offsets."),
        "max_records": Param(None, type=["null", "integer"], minimum=1, title="Max records (capped run)"),
        "window_start": Param(None, type=["null", "string"], format="date-time",
                              title="Window start (backfill_window)", description="ISO-8601, UTC if no zone"),
        "window_end": Param(None, type=["null", "string"], format="date-time", title="Window end (backfill_window)",
                            description="exclusive; ISO-8601, UTC if no zone"),
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
    from airflow.providers.standard.operators.python import PythonOperator, ShortCircuitOperator
    from airflow.sdk import DAG

    from tidemark.settings import spark_jars
    from tidemark.submit import DEFAULT_CONF
    from tidemark_airflow import tasks
    from tidemark_airflow.operators import TidemarkIngestOperator

    default_args = {"retries": config.retries, "retry_delay": dt.timedelta(seconds=config.retry_delay_seconds),
                    "retry_exponential_backoff": True,
                    "max_retry_delay": dt.timedelta(minutes=10)}
    with DAG(dag_id=config.dag_id, schedule=timetable(config.schedule), start_date=DEFAULT_START, catchup=False,
             params=trigger_form(),
             max_active_runs=1, default_args=default_args, doc_md=doc_md(config),
             tags=["tidemark", f"pipeline:{config.name}"], description=f"Kafka -> Delta: {config.name}") as dag:
        plan = PythonOperator(task_id="plan", python_callable=tasks.plan, op_kwargs={"pipeline": config.name})
        gate = ShortCircuitOperator(task_id="has_new_records", python_callable=tasks.has_new_records,
                                    op_args=[plan.output], ignore_downstream_trigger_rules=False)
        ingest = TidemarkIngestOperator(
            task_id="ingest", conn_id=config.spark_conn_id, kafka_conn_id=config.kafka_conn_id,
            isolation_level=config.isolation_level, jars=",".join(spark_jars()),
            conf={**DEFAULT_CONF, **config.spark_conf},
            driver_memory="1g", name=f"tidemark-{config.name}")
        report = PythonOperator(task_id="report", python_callable=tasks.report,
                                op_kwargs={"pipeline": config.name}, trigger_rule="none_failed")
        plan >> gate >> ingest >> report
    return dag
