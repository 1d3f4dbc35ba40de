"""Freshness alerts (tidemark_airflow.alerts): the ingest DAG's Deadline Alert, its reference as the
scheduler evaluates it (serialized and read back, on a real Delta table), and the callback that checks
again before it calls the pipeline's notifier. A real scheduler missing a deadline: tests/e2e/test_local_airflow.py."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidemark.config.pipeline import parse_pipeline

CALLS: list[dict] = []
NEWEST = dt.datetime(2025, 11, 26, 10, 30, tzinfo=dt.UTC)


def record(context, **kwargs):
    """A user's callback (a function): gets the context and the pipeline's kwargs."""
    CALLS.append({"context": context, **kwargs})


class Notifier:
    """Shaped like an Airflow notifier: built with the kwargs, called with the context."""

    def __init__(self, channel: str) -> None:
        self.channel = channel

    def __call__(self, context) -> None:
        CALLS.append({"channel": self.channel, "context": context})


@pytest.fixture
def pipeline(tmp_path, monkeypatch):
    folder, lake = tmp_path / "pipelines", tmp_path / "lake"
    folder.mkdir()
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(folder))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(lake))
    (folder / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\nfreshness_sla: 2h\n")
    CALLS.clear()

    def write(*times):
        column = pa.array(times, pa.timestamp("us", tz="UTC"))
        write_deltalake(str(lake / "orders"), pa.table({"kafka_timestamp": column}), mode="append")
    return write


def config(**extra):
    return parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", **extra}, "orders.yaml")


def test_a_pipeline_with_freshness_sla_gets_a_deadline_alert_calling_back_through_tidemark():
    from airflow.sdk import SyncCallback

    from tidemark_airflow.alerts import NewestRecordReference, freshness_deadline

    assert freshness_deadline(config()) is None
    alert = freshness_deadline(config(freshness_sla="2h", freshness_alert={
        "callback": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", "kwargs": {"to": "oncall@example.com"}}))
    assert alert.reference == NewestRecordReference("orders") and alert.interval == dt.timedelta(hours=2)
    assert alert.callback == SyncCallback("tidemark_airflow.alerts.freshness_missed", kwargs={
        "pipeline": "orders", "sla_seconds": 7200.0, "notify": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
        "notify_kwargs": {"to": "oncall@example.com"}})


def test_the_scheduler_reads_the_reference_back_and_counts_the_deadline_from_the_newest_record(pipeline):
    from airflow.serialization.decoders import decode_deadline_reference
    from airflow.serialization.encoders import encode_deadline_reference

    from tidemark_airflow.alerts import NewestRecordReference

    stored = encode_deadline_reference(NewestRecordReference("orders"))
    assert stored["__class_path"] == "tidemark_airflow.alerts.NewestRecordReference"  # registered by the plugin
    reference = decode_deadline_reference(stored)
    two_hours, before = dt.timedelta(hours=2), dt.datetime.now(dt.UTC)
    # no record yet: from the run's creation (a new pipeline must bring its first records within the SLA)
    assert reference.evaluate_with(session=None, interval=two_hours, dag_id="d", run_id="r") >= before + two_hours
    pipeline(NEWEST - dt.timedelta(hours=1), NEWEST)
    assert reference.evaluate_with(session=None, interval=two_hours, dag_id="d", run_id="r") == NEWEST + two_hours


def test_a_broken_pipeline_file_counts_the_deadline_from_now_instead_of_stopping_the_scheduler(pipeline, tmp_path):
    from tidemark_airflow.alerts import NewestRecordReference

    (tmp_path / "pipelines" / "orders.yaml").write_text("name: orders\n")
    before = dt.datetime.now(dt.UTC)
    assert NewestRecordReference("orders")._evaluate_with(session=None) >= before


def test_a_missed_deadline_calls_the_function_with_the_context_and_the_alert(pipeline):
    from tidemark_airflow.alerts import freshness_missed

    pipeline(NEWEST)
    context = {"dag_run": {"dag_id": "tidemark_ingest__orders", "dag_run_id": "r1"}}  # as the scheduler gives it
    freshness_missed(context, "orders", 7200.0, f"{__name__}.record", {"channel": "#data"})
    [call] = CALLS
    assert call["channel"] == "#data" and call["context"]["dag_run"]["dag_run_id"] == "r1"
    alert = call["context"]["tidemark"]
    assert alert["pipeline"] == "orders" and alert["sla_seconds"] == 7200.0 and alert["freshness_seconds"] > 7200
    assert alert["newest_record_at"] == NEWEST.isoformat()
    assert alert["message"].startswith("Tidemark pipeline 'orders' is stale: its output's newest record is ")


def test_a_notifier_class_is_built_with_the_kwargs_and_called_with_the_context(pipeline):
    from tidemark_airflow.alerts import freshness_missed

    freshness_missed({}, "orders", 60.0, f"{__name__}.Notifier", {"channel": "#oncall"})  # no table: unknown age
    [call] = CALLS
    assert call["channel"] == "#oncall" and call["context"]["tidemark"]["freshness_seconds"] is None
    assert "newest record is of unknown age" in call["context"]["tidemark"]["message"]


def test_no_alert_when_a_later_run_made_the_output_fresh_again(pipeline):
    from tidemark_airflow.alerts import freshness_missed

    pipeline(dt.datetime.now(dt.UTC))
    assert freshness_missed({}, "orders", 7200.0, f"{__name__}.record", {}) is None
    assert CALLS == []
