"""The Airflow adapter's error policy: terminal errors fail the task at once (no retries),
transient ones are left to Airflow's retries; the ingest job's exit code for a terminal error
fails the ingest task the same way."""

from __future__ import annotations

import pytest

from tidemark.errors import (
    BadRecordsError,
    ConfigError,
    KafkaAuthenticationError,
    KafkaUnavailableError,
    LedgerConflictError,
    PipelineBusyError,
    TopicRecreatedError,
    is_transient,
)


def raising(error: Exception):
    # Airflow is imported inside the tests: the e2e tier gives it a private home before its first import.
    from tidemark_airflow.tasks import fail_fast_on_terminal_errors

    @fail_fast_on_terminal_errors
    def task(**context):
        raise error
    return task


@pytest.mark.parametrize("error", [ConfigError("x"), TopicRecreatedError("x"), KafkaAuthenticationError("x"),
                                   PipelineBusyError.held_by("p", "run 'r'", "planning"), BadRecordsError("x")])
def test_terminal_errors_fail_the_task_without_retries(error):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=type(error).__name__):
        raising(error)()


@pytest.mark.parametrize("error", [KafkaUnavailableError("x"), LedgerConflictError("x"), OSError("disk")])
def test_transient_and_unexpected_errors_are_left_to_retries(error):
    with pytest.raises(type(error)):
        raising(error)()
    assert is_transient(error)


def test_the_busy_message_names_the_holder_and_what_to_do():
    message = str(PipelineBusyError.held_by("orders", "run 'scheduled__1' froze batch 7", "planning"))
    assert message.startswith("pipeline 'orders': another run holds the pipeline: run 'scheduled__1' froze batch 7.")
    assert "wrote nothing" in message and "max_active_runs=1" in message


def test_the_ingest_operator_fails_fast_on_the_jobs_terminal_exit_code(monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from tidemark.batch.plan import BatchPlan
    from tidemark.offsets import OffsetRange
    from tidemark_airflow import operators
    from tidemark_spark.ingest import TERMINAL_EXIT_CODE

    plan = BatchPlan("orders", 3, "/t", "/l", [OffsetRange("orders", 0, 0, 5)])

    class TI:
        def xcom_pull(self, task_ids):
            return plan.to_json()

    monkeypatch.setattr(operators, "kafka_properties", lambda conn_id, pipeline: {"bootstrap.servers": "h:1"})
    monkeypatch.setattr(operators, "spark_master", lambda conn_id, pipeline: "local[1]")
    monkeypatch.setattr(operators, "require_spark_jars", lambda: ["/j.jar"])
    operator = operators.TidemarkIngestOperator(task_id="ingest", kafka_conn_id="k", isolation_level="read_committed")
    for code, expected in ((TERMINAL_EXIT_CODE, AirflowFailException), (1, AirflowException)):
        def submit(self, context, code=code):
            raise AirflowException(f"Cannot execute: spark-submit ... Error code is: {code}.")
        monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
        with pytest.raises(expected) as raised:
            operator.execute({"ti": TI()})
        assert (type(raised.value) is AirflowFailException) == (expected is AirflowFailException)


@pytest.mark.parametrize(("table", "uri"), [
    ("s3a://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("s3://lake/tidemark/orders", "s3://lake/tidemark/orders"),
    ("/data/lake/orders", "file:///data/lake/orders"),
])
def test_the_asset_uri_of_a_table(table, uri):
    from tidemark_airflow.assets import asset_uri

    assert asset_uri(table) == uri
