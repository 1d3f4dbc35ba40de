"""Which phase of its batch a run is in at the moment a fault lands, decided from what the run is doing:

- plan           : the run's `plan` task is running (ledger read, Kafka offsets, the frozen plan written).
- read           : the `ingest` task runs and its job has not logged "batch N: reading ... offsets" yet (the
                   spark-submit start-up, the session, the executors: step "job start"), or it has and the
                   Spark job reading Kafka and writing the data files still has an active stage (step
                   "reading", from the driver's UI at the pipeline's fixed spark.ui.port).
- output commit  : after the "reading" line, every stage is complete and "batch N committed to <table>" is
                   not logged yet: the Delta commit of the output.
- dead letters   : the output is committed with bad records ("(N records read, M bad ...)", M > 0) and the
                   "dead letters written" line is not logged yet.
- ledger commit  : the output (and dead letters) are committed, "batch N committed in the ledger" is not
                   logged yet (the reconciliation and the ledger's Delta commit).
- finalize       : the ledger line is logged (the consumer-group mirror, the report, the task's exit) or the
                   ingest task succeeded and the run is not marked finished yet.
- waiting        : no task of the run is running (queued on Celery, or in its retry delay).

The log lines are the job's own (tidemark.batch.execute / finalize), read from the attempt's task log in the
folder of the Celery worker that runs it."""

from __future__ import annotations

import re

from bench.chaos import chaos_stack

PHASES = ("plan", "read", "output commit", "dead letters", "ledger commit", "finalize", "waiting")


def ingest_step(text: str, pipeline: str, ui_port: int) -> tuple[str, str]:
    """(phase, step) of a running ingest attempt from its task log so far."""
    if re.search(r"batch \d+ (committed|was already committed) in the ledger", text):
        return "finalize", "after the ledger commit"
    if re.search(r"dead letters (written|an earlier attempt did not write)", text):
        return "ledger commit", "after the dead letters"
    committed = re.findall(r"batch \d+ committed to \S+ \((\d+) records read, (\d+) bad", text)
    if committed:
        return ("dead letters", "output committed, bad records") if int(committed[-1][1]) else \
            ("ledger commit", "output committed, no bad record")
    if re.search(r"batch \d+ committed to |already in the output table|was already in ", text):
        return "ledger commit", "output committed"
    if re.search(r"batch \d+: reading \d+ offsets", text):
        progress = chaos_stack.spark_app_progress(pipeline, ui_port)
        if progress and not progress["active"] and progress["complete"]:
            return "output commit", "stages done, Delta commit"
        return "read", "reading"
    return "read", "job start"


def run_phase(airflow: chaos_stack.Airflow, pipeline: str, run_id: str, ui_port: int) -> dict:
    """The run's phase now, with the task, its try and the worker running it."""
    tasks = airflow.tasks(pipeline, run_id)
    plan, ingest = tasks.get("plan", {}), tasks.get("ingest", {})
    if plan.get("state") == "running":
        where = chaos_stack.task_log(pipeline, run_id, "plan", plan["try_number"])
        return {"phase": "plan", "step": "plan", "task": "plan", "try": plan["try_number"],
                "worker": where[0] if where else None}
    if ingest.get("state") == "running":
        where = chaos_stack.task_log(pipeline, run_id, "ingest", ingest["try_number"])
        text = where[1].read_text(errors="replace") if where else ""
        phase, step = ingest_step(text, pipeline, ui_port)
        return {"phase": phase, "step": step, "task": "ingest", "try": ingest["try_number"],
                "worker": where[0] if where else None}
    if ingest.get("state") == "success":
        return {"phase": "finalize", "step": "run closing", "task": None, "try": None, "worker": None}
    return {"phase": "waiting", "step": ",".join(f"{k}={v.get('state')}" for k, v in sorted(tasks.items())),
            "task": None, "try": None, "worker": None}
