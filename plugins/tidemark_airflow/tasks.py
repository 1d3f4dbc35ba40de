"""Python callables of the ingest and replay DAGs' tasks. Thin: resolve connections, call the core
(``tidemark.batch``), log. A terminal error fails the task at once; a transient one is left to
Airflow's retries."""

from __future__ import annotations

import functools
import logging

from tidemark import settings
from tidemark.batch import (
    ResetRequest,
    mirror_to_consumer_group,
    partition_status,
    prepare_backfill,
    prepare_batch,
    reset_offsets,
)
from tidemark.config import PipelineConfig, find_pipeline
from tidemark.errors import PipelineBusyError, TidemarkError
from tidemark_airflow.connections import configure_storage, kafka_properties, schema_registry
from tidemark_airflow.naming import ingest_dag_id
from tidemark_airflow.run_modes import decide_run

log = logging.getLogger("tidemark")


def fail_fast_on_terminal_errors(task):
    """A terminal Tidemark error (a broken pipeline file or form value, a recreated topic, refused
    credentials, another run holding the pipeline...) fails the task at once: a retry would fail
    the same way (and repeated failed logins can lock an account). Transient errors (Kafka not
    answering in time) propagate unchanged, for Airflow's retries."""
    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        from airflow.sdk.exceptions import AirflowFailException

        try:
            return task(*args, **kwargs)
        except TidemarkError as exc:
            if exc.transient:
                raise
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from None
    return wrapper


def pipeline_config(pipeline: str) -> PipelineConfig:
    """The pipeline's configuration, with this process set up for its object store (if any)."""
    config = find_pipeline(pipeline)
    configure_storage(config)
    return config


@fail_fast_on_terminal_errors
def plan(pipeline: str, **context) -> str | None:
    """Recover an unfinished batch or freeze the next one (incremental, capped or backfill, from the
    trigger form or the native backfill's data interval); returns the plan as JSON (no secrets), or
    None when there is nothing to read: the task (a short-circuit) then skips the ingest task, after
    reporting the pipeline's offsets and lag (``report``) as the ingest task does after a commit."""
    config = pipeline_config(pipeline)
    ti, dag_id = context["ti"], context["dag"].dag_id
    dag_run = context["dag_run"]
    run_type = str(getattr(dag_run.run_type, "value", dag_run.run_type))
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    request = decide_run(config.name, dict(context.get("params") or {}), run_type,
                         (start, end) if start is not None and end is not None else None)

    def run_state(run_id: str) -> str:
        state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        return str(getattr(state, "value", state))

    properties = kafka_properties(config.kafka_conn_id, config.name)
    log.info("pipeline '%s': %s run (%s)", pipeline, request.mode, run_type)
    if request.backfill is not None:
        batch = prepare_backfill(config, properties, request.backfill, run_id=context["run_id"],
                                 run_state=run_state, schemas=schema_registry(config))
    else:
        if request.max_records is not None:
            config = config.model_copy(update={"max_offsets_per_run": request.max_records})
        batch = prepare_batch(config, properties, run_id=context["run_id"], run_state=run_state,
                              schemas=schema_registry(config))
    if batch.is_empty:
        log.info("pipeline '%s': nothing to read; the ingest task will be skipped (no Spark launch)", pipeline)
        report(config, properties)
        return None
    return batch.to_json()


def report(config: PipelineConfig, properties: dict[str, str]) -> list[dict]:
    """After every run (by the ingest task after its commit, by the plan task when there was nothing
    to read): mirror the committed offsets to the pipeline's consumer group and log committed offset,
    latest offset and lag per partition. Best effort: the batch is committed (or there was none), so a
    failure here is a warning, and the next run mirrors again."""
    try:
        mirror_to_consumer_group(config, properties)
        rows = partition_status(config, properties)
    except Exception as exc:
        log.warning("pipeline '%s': could not mirror the committed offsets to its consumer group or read the lag "
                    "(%s); the data and the ledger are not affected, and the next run mirrors again", config.name,
                    exc)
        return []
    log.info("pipeline '%s' after this run (table %s, ledger %s):", config.name, config.table_uri,
             settings.ledger_uri())
    for row in rows:
        log.info("  %s:%s committed=%s latest=%s lag=%s last_batch=%s", row["topic"], row["partition"],
                 row["committed_offset"], row["latest_offset"], row["lag"], row["last_batch_id"])
    log.info("  total lag: %d", sum(r["lag"] or 0 for r in rows))
    return rows


@fail_fast_on_terminal_errors
def reset(pipeline: str, **context) -> dict:
    """The replay DAG's task: plan (dry run) or apply an offset reset from the form. Refused while
    a run of the pipeline's ingest DAG is active."""
    config = pipeline_config(pipeline)
    params = dict(context.get("params") or {})
    ingest = ingest_dag_id(config.name)
    active = context["ti"].get_dr_count(dag_id=ingest, states=["queued", "running"])
    if active:
        raise PipelineBusyError.held_by(pipeline, f"{active} run(s) of {ingest} are active",
                                        "resetting offsets: nothing was changed")
    request = ResetRequest(params["scenario"], tuple(params.get("scope") or ()), offset=params.get("offset"),
                           shift=params.get("shift"), datetime=params.get("datetime"),
                           duration=params.get("duration"), offsets_file=params.get("offsets_file"),
                           execute=not params.get("dry_run", True), reason=params.get("reason"),
                           actor=f"{context['dag'].dag_id}/{context['run_id']}")
    outcome = reset_offsets(config, kafka_properties(config.kafka_conn_id, config.name), request)
    log.info("pipeline '%s': %s (%s)", pipeline, "reset APPLIED" if outcome.executed else "DRY RUN, nothing changed",
             request.scenario)
    for row in outcome.plan.as_table():
        log.info("  %s:%s current=%s new=%s change=%s", row["topic"], row["partition"], row["current"], row["new"],
                 row["change"])
    for warning in outcome.plan.warnings:
        log.warning("  %s", warning)
    return {"executed": outcome.executed, "ledger_entry": outcome.batch_id, "rows": outcome.plan.as_table(),
            "warnings": outcome.plan.warnings}
