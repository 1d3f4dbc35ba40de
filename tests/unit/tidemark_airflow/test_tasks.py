"""The Airflow tasks' error policy (tidemark_airflow.tasks): terminal errors fail the task at once (no
retries), transient ones are left to Airflow's retries."""

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


def test_the_scheduled_audit_passes_a_clean_table_and_fails_at_once_on_damage(tmp_path, monkeypatch):
    import pyarrow as pa
    from airflow.sdk.exceptions import AirflowFailException
    from deltalake import write_deltalake

    from tidemark.ledger.store import COMMITTED, Ledger, LedgerRow, fingerprint
    from tidemark_airflow.tasks import audit

    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "p.yaml").write_text("name: p\ntopics: [t]\ntable: out\naudit: {every: 1d}\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(tmp_path / "pipelines"))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    Ledger(str(tmp_path / "lake" / "_tidemark" / "offsets")).append(
        [LedgerRow("p", 1, "batch", COMMITTED, "t", 0, 0, 3, 3, 0)], expected=fingerprint([]))
    rows = pa.table({"kafka_topic": ["t"] * 3, "kafka_partition": pa.array([0] * 3, pa.int32()),
                     "kafka_offset": pa.array([0, 1, 2], pa.int64()), "ingest_batch_id": pa.array([1] * 3, pa.int64())})
    write_deltalake(str(tmp_path / "lake" / "out"), rows)
    assert audit("p") == {"ok": True, "checked_ranges": 1, "records": 3, "duplicated_offsets": 0, "outside_rows": 0,
                          "in_both_rows": 0}
    write_deltalake(str(tmp_path / "lake" / "out"), rows.slice(1, 1), mode="append")
    with pytest.raises(AirflowFailException, match=r"AuditDamageError: .*DAMAGE.*1 duplicated offsets") as failed:
        audit("p")
    assert str(failed.value).count("pipeline 'p'") == 1, str(failed.value)  # it used to say it twice


def test_the_scheduled_audit_of_a_keyed_table_names_a_key_held_twice(tmp_path, monkeypatch, caplog):
    import pyarrow as pa
    from airflow.sdk.exceptions import AirflowFailException
    from deltalake import write_deltalake

    from tidemark.ledger.store import COMMITTED, Ledger, LedgerRow, fingerprint
    from tidemark_airflow.tasks import audit

    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "k.yaml").write_text(
        "name: k\ntopics: [t]\ntable: out\nvalue_format: json\nvalue_schema: {id: bigint}\nkeyed: {keys: [id]}\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(tmp_path / "pipelines"))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    Ledger(str(tmp_path / "lake" / "_tidemark" / "offsets")).append(
        [LedgerRow("k", 1, "batch", COMMITTED, "t", 0, 0, 3, 3, 0)], expected=fingerprint([]))
    rows = pa.table({"id": pa.array([7, 7], pa.int64()), "kafka_topic": ["t"] * 2,
                     "kafka_partition": pa.array([0] * 2, pa.int32()), "kafka_offset": pa.array([0, 2], pa.int64()),
                     "ingest_batch_id": pa.array([1] * 2, pa.int64())})
    write_deltalake(str(tmp_path / "lake" / "out"), rows)
    # The keyed Kafka side (deleted keys present: a Spark job over what Kafka holds) is tested against the real
    # services in tests/integration/test_keyed_deletes.py; here it finds nothing (and reads no broker).
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "x:1"}}')
    monkeypatch.setattr("tidemark.audit.pipeline_audit.verify_keys", lambda *a, **k: {"deleted_keys_present": 0,
                                                                             "deleted_keys": []})
    with pytest.raises(AirflowFailException, match="AuditDamageError"):
        audit("k")
    assert "pipeline 'k': key held by more than one row: {'id': 7, 'rows': 2}" in caplog.text


class ReportingRun:
    """What the success callbacks use of a PipelineRun; counts the reads of the pipeline's status."""

    def __init__(self, tmp_path):
        from tidemark.config.pipeline import parse_pipeline

        self.name, self.store, self.calls = "orders", None, []
        self.config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": str(tmp_path / "orders")},
                                     "orders.yaml")

    def report(self):
        self.calls.append("report")
        return [{"topic": "orders", "partition": 0, "lag": 0, "held_by_open_transactions": 0, "held_since": None}]

    def status(self):
        self.calls.append("status")
        return []

    def recent_entries(self, count):
        self.calls.append("recent_entries")
        return [{"batch_id": 3, "records": 5, "dead_letters": 0, "duration_seconds": 1.0}]


def test_the_success_callbacks_report_the_run_their_task_ended_with_one_read_of_the_lag(tmp_path):
    """The report and the metrics run after the task's success: the plan task's only when it ended the run
    (an empty plan), the ingest task's on the run its execute committed; the metrics take the lag the
    report read (one status read, not two)."""
    from types import SimpleNamespace

    from tidemark_airflow.tasks import after_ingest, after_plan

    after_plan({"task": SimpleNamespace()})  # a plan that froze a batch: the ingest task will report
    empty, committed = ReportingRun(tmp_path), ReportingRun(tmp_path)
    after_plan({"task": SimpleNamespace(tidemark_run=empty)})
    assert empty.calls == ["report"]
    after_ingest({"task": SimpleNamespace(tidemark_run=committed, tidemark_batch_id=3), "ti": None})
    assert committed.calls == ["report", "recent_entries"]


def test_the_replay_task_refuses_while_a_run_of_the_ingest_dag_is_active_and_changes_nothing(monkeypatch):
    """The reset reads Airflow's own count of the ingest DAG's queued and running runs before anything
    else: with one active, the task fails at once (no retry) and the pipeline's reset is never called."""
    from airflow.sdk.exceptions import AirflowFailException

    from tidemark_airflow import tasks

    class Run:
        name = "orders"

        def reset(self, request):
            raise AssertionError("the reset ran although an ingest run was active")

    class TaskInstance:
        def __init__(self, active):
            self.active, self.asked = active, []

        def get_dr_count(self, dag_id, states):
            self.asked.append((dag_id, states))
            return self.active

    monkeypatch.setattr(tasks, "open_run", lambda pipeline: Run())
    ti = TaskInstance(1)
    with pytest.raises(AirflowFailException, match="PipelineBusyError.*1 run\\(s\\) of tidemark_ingest__orders are "
                                                   "active.*nothing was changed"):
        tasks.reset("orders", ti=ti, params={"scenario": "to-earliest"})
    assert ti.asked == [("tidemark_ingest__orders", ["queued", "running"])]


def _api_failure(kind: str):
    """An execution-API failure as it reaches the task: under the task supervisor an AirflowRuntimeError
    carrying the status, under ``dag.test()`` the API client's ServerResponseError, or a network error."""
    import httpx
    from airflow.sdk.api.client import ServerResponseError
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse

    if kind.startswith("supervised"):
        status = int(kind.split()[1])
        return AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR,
                                                 detail={"status_code": status, "message": "x"}))
    if kind.startswith("in-process"):
        request = httpx.Request("GET", "http://api/execution/dag-runs/d/r/state")
        response = httpx.Response(int(kind.split()[1]), request=request)
        return ServerResponseError("server answered", request=request, response=response)
    return AirflowRuntimeError(ErrorResponse(error=ErrorType.GENERIC_ERROR, detail=None))


@pytest.mark.parametrize("kind", ["supervised 404", "in-process 404"])
def test_the_owner_lookup_counts_a_run_airflow_does_not_know_as_finished(kind):
    from tidemark.batch.ownership import is_owner_alive
    from tidemark_airflow.tasks import dag_run_state_lookup

    class TaskInstance:
        def get_dagrun_state(self, dag_id, run_id):
            raise _api_failure(kind)

    assert is_owner_alive("manual__owner", dag_run_state_lookup(TaskInstance(), "tidemark_ingest__orders")) is False


@pytest.mark.parametrize("kind", ["supervised 503", "in-process 500", "network"])
def test_a_failed_owner_lookup_keeps_the_batch_with_its_owner_and_is_retried(kind):
    """A transient failure of the execution API must never let a run take a live run's batch: it is an
    error Airflow retries (transient), not an answer."""
    from tidemark.batch.ownership import is_owner_alive
    from tidemark.errors import OwnerStateUnknownError
    from tidemark_airflow.tasks import dag_run_state_lookup

    class TaskInstance:
        def get_dagrun_state(self, dag_id, run_id):
            raise _api_failure(kind)

    with pytest.raises(OwnerStateUnknownError, match="cannot look up the state of run 'manual__owner' of "
                                                     "tidemark_ingest__orders.*stays with it") as failed:
        is_owner_alive("manual__owner", dag_run_state_lookup(TaskInstance(), "tidemark_ingest__orders"))
    assert failed.value.transient and failed.value.fields["pipeline"] == "orders"


def test_the_plan_task_checks_the_spark_connection_before_it_freezes_a_batch(tmp_path, monkeypatch):
    """A typo in spark_conn_id used to pass the plan task, freeze a batch, and fail the ingest task with
    retries. Now the plan task fails at once, with no batch frozen."""
    from airflow.sdk.exceptions import AirflowFailException

    from tidemark.config.pipeline import parse_pipeline
    from tidemark.connections import EnvironmentResolver
    from tidemark.run import PipelineRun
    from tidemark_airflow import tasks

    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFUALT", raising=False)
    config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders",
                             "spark_conn_id": "spark_defualt"}, "orders.yaml")
    run = PipelineRun(config, EnvironmentResolver(), str(tmp_path / "_tidemark" / "offsets"), None)
    monkeypatch.setattr(PipelineRun, "prepare", lambda *a, **k: pytest.fail("a batch was frozen"))
    monkeypatch.setattr(tasks, "open_run", lambda pipeline: run)
    dag_run = type("DagRun", (), {"run_type": "manual"})()
    context = {"ti": object(), "dag": type("Dag", (), {"dag_id": "tidemark_ingest__orders"})(), "dag_run": dag_run,
               "run_id": "manual__1", "params": {}}
    with pytest.raises(AirflowFailException, match="ConfigError.*spark_defualt"):
        tasks.plan("orders", **context)
