"""Python callables of the ingest and replay DAGs' tasks. Thin: open the pipeline's run
(``tidemark.run.PipelineRun``, connections read through Airflow), call it, log. A terminal error
fails the task at once; a transient one is left to Airflow's retries."""

from __future__ import annotations

import functools
import logging

from tidemark.batch import BatchPlan, ResetRequest
from tidemark.errors import OwnerStateUnknownError, PipelineBusyError, TidemarkError
from tidemark.run import PipelineRun
from tidemark_airflow.metrics import observe_run
from tidemark_airflow.naming import ingest_dag_id, pipeline_of
from tidemark_airflow.resolver import open_run, run_for_plan
from tidemark_airflow.run_modes import decide_run, refuse_unused_fields

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


@fail_fast_on_terminal_errors
def plan(pipeline: str, **context) -> str | None:
    """Recover an unfinished batch or freeze the next one (incremental, capped or backfill, from the
    trigger form or the native backfill's data interval); returns the plan as JSON (no secrets), or
    None when there is nothing to read: the task (a short-circuit) then skips the ingest task, and its
    success callback (``after_plan``) reports, as the ingest task's does after a commit."""
    run = open_run(pipeline)
    ti, dag_id = context["ti"], context["dag"].dag_id
    dag_run = context["dag_run"]
    run_type = str(getattr(dag_run.run_type, "value", dag_run.run_type))
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    request = decide_run(run.name, dict(context.get("params") or {}), run_type,
                         (start, end) if start is not None and end is not None else None)

    log.info("pipeline '%s': %s run (%s)", pipeline, request.mode, run_type)
    if request.max_records is not None:
        run = run.with_config(max_offsets_per_run=request.max_records)
    run.check_spark_connection()  # what the ingest task needs, before a batch is frozen for it
    batch = run.prepare(owner=context["run_id"], run_state=dag_run_state_lookup(ti, dag_id),
                        backfill=request.backfill)
    if batch.is_empty:
        log.info("pipeline '%s': nothing to read; the ingest task will be skipped (no Spark launch)", pipeline)
        context["task"].tidemark_run = run  # the run this task ended: its success callback reports it
        return None
    return batch.to_json()


def dag_run_state_lookup(ti, dag_id: str):
    """The owner lookup of ``tidemark.batch.ownership`` on the Task SDK: a run's state from the execution
    API. Only a 404 (no such run in this Airflow; under the task supervisor an ``AirflowRuntimeError`` whose
    detail holds the status, under ``dag.test()`` the API client's own ``ServerResponseError``) raises
    LookupError, which says the owner is gone. Any other failure (the API server down or slow, a network
    error) raises OwnerStateUnknownError, transient: the batch stays with its owner and Airflow's retry asks
    again. A transient error must never let this run take a live run's batch."""
    def run_state(run_id: str) -> str:
        try:
            state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        except Exception as exc:
            if _status_code(exc) == 404:
                raise LookupError(f"Airflow has no run '{run_id}' of {dag_id}") from None
            raise OwnerStateUnknownError(
                f"cannot look up the state of run '{run_id}' of {dag_id}, which owns the pending batch "
                f"({type(exc).__name__}: {str(exc)[:200]}); the batch stays with it and nothing was planned. "
                f"Airflow retries the task.", pipeline=pipeline_of(dag_id) or dag_id) from None
        return str(getattr(state, "value", state))
    return run_state


def _status_code(exc: BaseException) -> int | None:
    """The HTTP status of an execution-API failure, however it reached the task."""
    detail = getattr(getattr(exc, "error", None), "detail", None)
    if isinstance(detail, dict) and isinstance(detail.get("status_code"), int):
        return detail["status_code"]
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def report_run(run: PipelineRun, batch_id: int | None = None) -> None:
    """After a run: the report (``PipelineRun.report``: offsets mirrored to the consumer group, lag logged),
    then the metrics and hold warnings from the lag the report just read (``tidemark_airflow.metrics``)."""
    observe_run(run, run.report() or None, batch_id=batch_id)


def after_plan(context) -> None:
    """The plan task's success callback: after an empty plan (the run ends here), the report and metrics.
    They run once Airflow has recorded the task's success, so they add nothing to the run's time. Never
    fails: nothing was to be read."""
    run = getattr(context["task"], "tidemark_run", None)
    if run is not None:
        report_run(run)


def after_ingest(context) -> None:
    """The ingest task's success callback: the report, then the committed batch's and the pipeline's
    metrics and the hold warnings, on the run the task executed (``TidemarkIngestOperator``). Never fails:
    the batch is committed."""
    try:
        task = context["task"]
        run, batch_id = getattr(task, "tidemark_run", None), getattr(task, "tidemark_batch_id", None)
        if run is None or batch_id is None:  # not set by this process's execute: the plan task's XCom says
            plan = BatchPlan.from_json(context["ti"].xcom_pull(task_ids="plan"))
            run, batch_id = run_for_plan(plan), plan.batch_id
        report_run(run, batch_id=batch_id)
    except Exception as exc:
        log.warning("could not report the ingest task's run or send its metrics (%s: %s)", type(exc).__name__, exc)


SCENARIO_FIELDS = {"to-offset": ("offset",), "shift-by": ("shift",), "to-datetime": ("datetime",),
                   "by-duration": ("duration",), "from-file": ("offsets_file",)}
"""The replay form's fields that each scenario reads (``to-earliest`` and ``to-latest`` read none)."""


@fail_fast_on_terminal_errors
def reset(pipeline: str, **context) -> dict:
    """The replay DAG's task: plan (dry run) or apply an offset reset from the form. Refused while
    a run of the pipeline's ingest DAG is active."""
    params = dict(context.get("params") or {})
    refuse_unused_fields(params, "scenario", params.get("scenario") or "", SCENARIO_FIELDS, pipeline)
    run = open_run(pipeline)
    ingest = ingest_dag_id(run.name)
    active = context["ti"].get_dr_count(dag_id=ingest, states=["queued", "running"])
    if active:
        raise PipelineBusyError.held_by(pipeline, f"{active} run(s) of {ingest} are active",
                                        "resetting offsets: nothing was changed")
    request = ResetRequest(params["scenario"], tuple(params.get("scope") or ()), offset=params.get("offset"),
                           shift=params.get("shift"), datetime=params.get("datetime"),
                           duration=params.get("duration"), offsets_file=params.get("offsets_file"),
                           execute=not params.get("dry_run", True), reason=params.get("reason"),
                           owner=f"{context['dag'].dag_id}/{context['run_id']}")
    outcome = run.reset(request)
    log.info("pipeline '%s': %s (%s)", pipeline, "reset APPLIED" if outcome.executed else "DRY RUN, nothing changed",
             request.scenario)
    for row in outcome.preview.as_table():
        log.info("  %s:%s current=%s new=%s change=%s", row["topic"], row["partition"], row["current"], row["new"],
                 row["change"])
    for warning in outcome.preview.warnings:
        log.warning("  %s", warning)
    return {"executed": outcome.executed, "ledger_entry": outcome.batch_id, "rows": outcome.preview.as_table(),
            "warnings": outcome.preview.warnings}


@fail_fast_on_terminal_errors
def maintain(pipeline: str, **context) -> dict:
    """The maintenance DAG's task: OPTIMIZE (and Z-order), VACUUM and log checkpoints of the pipeline's
    tables (``tidemark.operations.table_maintenance``). Safe while the ingest DAG commits batches: Delta's conflict
    rules let both commit, and an OPTIMIZE that loses is run again on the new version."""
    report = open_run(pipeline).maintain()
    log.info("pipeline '%s': maintenance done: %s", pipeline, report)
    return report


@fail_fast_on_terminal_errors
def audit(pipeline: str, verify_sample: int = 0, **context) -> dict:
    """The audit DAG's task: ``tidemark audit`` (``PipelineRun.audit``); damage fails it (``AuditDamageError``)."""
    from tidemark.audit.live_table import summary, verdict
    from tidemark.config.audit_schedule import AuditDamageError
    from tidemark_spark.audit_decode import launch

    run = open_run(pipeline)
    report = run.audit(verify_sample=verify_sample, values=lambda check: launch(run, check))
    found = report.to_dict()
    for name in ("duplicates", "missing", "outside", "in_both"):
        for row in found[name][:20]:
            log.error("pipeline '%s': %s: %s", pipeline, name, row)
    what = "sampled key differs from its newest change in Kafka" if run.config.keyed else \
        "sampled range differs from Kafka"
    for row in (report.sample or {}).get("mismatches", [])[:20]:
        log.error("pipeline '%s': %s: %s", pipeline, what, row)
    for row in found.get("duplicate_keys", [])[:20]:
        log.error("pipeline '%s': key held by more than one row: %s", pipeline, row)
    if not report.ok:
        raise AuditDamageError(verdict(report), pipeline=pipeline)  # the error names the pipeline once
    log.info("%s", summary(report))
    return {k: found[k] for k in ("ok", "checked_ranges", "records", "duplicated_offsets", "outside_rows",
                                  "in_both_rows")}
