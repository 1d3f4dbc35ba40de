"""The ingest operator (tidemark_airflow.operators): a terminal exit code of the job fails the task without
retries (read from spark-submit's exit code, never from an error message), and credentials never reach a
spark-submit command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidemark.errors import ConfigError, JobExit


def _run(properties, store=None, master="local[1]"):
    """A stand-in for tidemark.run.PipelineRun with the attributes the operator reads."""
    return SimpleNamespace(name="p", kafka_properties=properties, store=store, spark_master=master,
                           config=SimpleNamespace(isolation_level="read_committed"),
                           job_environment=lambda: {"TIDEMARK_KAFKA_PROPERTIES": "{}"}, report=lambda: [],
                           batch_summary=lambda plan: {})


def test_the_ingest_operator_fails_fast_on_the_jobs_terminal_exit_code(monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from tidemark.batch.plan import BatchPlan
    from tidemark.offsets import OffsetRange
    from tidemark_airflow import operators

    plan = BatchPlan("orders", 3, "/t", "/l", [OffsetRange("orders", 0, 0, 5)])

    class TI:
        def xcom_pull(self, task_ids):
            return plan.to_json()

    monkeypatch.setattr(operators.PipelineRun, "for_plan", lambda plan, resolver: _run({"bootstrap.servers": "h:1"}))
    monkeypatch.setattr(operators, "require_spark_jars", lambda: ["/j.jar"])
    operator = operators.TidemarkIngestOperator(task_id="ingest")
    for code, expected in ((JobExit.TERMINAL, AirflowFailException), (JobExit.RETRYABLE, AirflowException)):
        def submit(self, context, code=code):  # as the provider's hook: the process, then an error without a type
            self._hook = SimpleNamespace(_submit_sp=SimpleNamespace(returncode=int(code)))
            raise AirflowException("Cannot execute: spark-submit ...")
        monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
        with pytest.raises(expected) as raised:
            operator.execute({"ti": TI()})
        assert (type(raised.value) is AirflowFailException) == (expected is AirflowFailException)
        assert "TIDEMARK_KAFKA_PROPERTIES" not in operator.env_vars  # the secrets left with the job


SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_the_ingest_task_refuses_masters_that_would_put_credentials_on_the_command_line():
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    secured = _run({"bootstrap.servers": "h:9094", "sasl.jaas.config": f'{SCRAM} required username="a" password="b";'})
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="command line"):
            refuse_credentials_on_the_command_line(master, secured)
    refuse_credentials_on_the_command_line("local[2]", secured)
    refuse_credentials_on_the_command_line("spark://master:7077", secured)
    refuse_credentials_on_the_command_line("yarn", _run({"bootstrap.servers": "h:9092"}))


def test_the_ingest_task_refuses_storage_keys_where_they_would_reach_the_command_line():
    from tidemark.storage import ObjectStore
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    plain = {"bootstrap.servers": "h:9092"}
    keys = _run(plain, ObjectStore("AKIA1", "s3cret", endpoint_url="http://minio:9000"))
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="storage connection holds a secret key.*IAM role"):
            refuse_credentials_on_the_command_line(master, keys)
        refuse_credentials_on_the_command_line(master, _run(plain, ObjectStore(region="eu-west-1")))  # a role
    refuse_credentials_on_the_command_line("spark://master:7077", keys)
