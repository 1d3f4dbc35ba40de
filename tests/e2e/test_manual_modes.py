"""Manual runs from the trigger form, through Airflow: a time-window backfill (twice: the second
adds nothing), a capped run, an incremental run that takes over a batch frozen by a run this Airflow does
not know, and a bad form value that fails before anything is written."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tests.e2e import timestamps
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.e2e


def test_window_backfill_twice_then_capped_and_incremental_runs(stack, spark_connect):
    """The last, incremental run is also the take-over of a batch frozen by a run this Airflow does not know
    (the one run covers both: a test of its own cost one more DAG run)."""
    from tests.e2e.conftest import environment
    from tidemark.batch.prepare import prepare_batch
    from tidemark.config.pipeline import load_pipeline

    stack.use_spark_connect(spark_connect)  # four ingest jobs: on the warm path (the run modes are the subject)
    topic = helpers.create_topic(helpers.unique("modes"), partitions=2)
    dag_id = stack.add_pipeline(topic, [topic])
    table = str(stack.lake / topic)
    ledger = Ledger(str(stack.lake / "_tidemark" / "offsets"))
    # Explicit record timestamps: 10 before the window, 8 on its (inclusive) start, 6 on its exclusive end
    end = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=1)
    start = end - dt.timedelta(minutes=1)
    timestamps.produce_at(topic, 10, start - dt.timedelta(seconds=30))
    timestamps.produce_at(topic, 8, start, start=10)
    timestamps.produce_at(topic, 6, end, start=18)
    window = {"mode": "backfill_window", "window_start": start.isoformat(), "window_end": end.isoformat()}

    run = stack.run_dag(dag_id, window)
    assert run.task_states["ingest"] == "success", run.log[-4000:]
    assert helpers.query(table, "SELECT COUNT(*) AS n FROM t") == [{"n": 8}]
    assert ledger.state(topic).positions == {}  # a backfill never moves the committed offsets

    version = helpers.table_version(table)
    run = stack.run_dag(dag_id, window)  # the same window again: nothing new in the output
    assert run.state == "success"
    assert helpers.query(table, "SELECT COUNT(*) AS n FROM t") == [{"n": 8}]
    kinds = sorted({(r.batch_id, r.kind, r.status) for r in ledger.rows(topic)})
    assert kinds == [(1, "backfill", "committed"), (2, "backfill", "committed")]
    assert helpers.table_version(table) in (version, version + 1)  # an empty append at most, never rows

    run = stack.run_dag(dag_id, {"mode": "capped", "max_records": 10})
    assert run.task_states["ingest"] == "success"
    assert sum(r.end_offset - r.start_offset for r in ledger.rows(topic) if r.batch_id == 3) == 10

    # Incremental: the rest, deduplicated against the backfill. Frozen first by a run whose Airflow has no
    # record of it (its metadata DB was reset): the execution API answers 404 for it, the one answer that says
    # the owner is gone (any other failure of the lookup keeps the batch with its owner and is retried). The
    # DAG run takes the batch over and commits it, exactly once.
    with environment(stack.env):
        config = load_pipeline(stack.pipelines / f"{topic}.yaml")
        frozen = prepare_batch(config, {"bootstrap.servers": helpers.bootstrap()}, owner="manual__gone_with_its_db")
    assert ledger.state(topic).pending_owner == "manual__gone_with_its_db"
    run = stack.run_dag(dag_id)
    assert run.task_states["ingest"] == "success", run.log[-4000:]
    assert helpers.query(table, "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) AS u "
                                "FROM t") == [{"n": 24, "u": 24}]
    rows = [r for r in ledger.rows(topic) if r.batch_id == frozen.batch_id]
    assert frozen.ranges and [(r.status, r.dag_run_id) for r in rows] == [("committed", run.run_id)] * len(
        frozen.ranges)


def test_a_bad_form_value_fails_the_plan_and_writes_nothing(stack):
    from airflow.sdk.exceptions import ParamValidationError

    topic = helpers.create_topic(helpers.unique("badform"), partitions=1)
    dag_id = stack.add_pipeline(topic, [topic], retries=0)
    helpers.produce(topic, 3)
    # Not a date-time at all: the form's JSON schema (format: date-time, checked since rfc3339-validator
    # is installed) refuses the run before it exists (tidemark's own parse error is unit-tested)
    with pytest.raises(ParamValidationError, match="window_start: 'noon' is not a 'date-time'"):
        stack.run_dag(dag_id, {"mode": "backfill_window", "window_start": "noon",
                               "window_end": "2026-01-01T00:00:00Z"})
    # Valid date-times the schema cannot judge: the plan task refuses the window
    run = stack.run_dag(dag_id, {"mode": "backfill_window", "window_start": "2026-01-02T00:00:00Z",
                                 "window_end": "2026-01-01T00:00:00Z"})
    assert run.state == "failed" and run.task_states["plan"] == "failed"
    assert "form field 'window_end' must be after 'window_start'" in run.log
    assert helpers.query_or_none(str(stack.lake / topic)) is None
    assert Ledger(str(stack.lake / "_tidemark" / "offsets")).rows(topic) == []
