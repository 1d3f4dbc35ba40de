"""The ingest operator (tidemark_airflow.operators): a terminal exit code of the job fails the task without
retries, and credentials never reach a spark-submit command line."""

from __future__ import annotations

import pytest

from tidemark.errors import ConfigError


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


SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_the_ingest_task_refuses_masters_that_would_put_credentials_on_the_command_line():
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    secured = {"bootstrap.servers": "h:9094", "sasl.jaas.config": f'{SCRAM} required username="a" password="b";'}
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="command line"):
            refuse_credentials_on_the_command_line(master, secured, "p")
    refuse_credentials_on_the_command_line("local[2]", secured, "p")
    refuse_credentials_on_the_command_line("spark://master:7077", secured, "p")
    refuse_credentials_on_the_command_line("yarn", {"bootstrap.servers": "h:9092"}, "p")


def test_the_ingest_task_refuses_storage_keys_where_they_would_reach_the_command_line():
    from tidemark.storage import ObjectStore
    from tidemark_airflow.operators import refuse_credentials_on_the_command_line

    plain = {"bootstrap.servers": "h:9092"}
    keys = ObjectStore("AKIA1", "s3cret", endpoint_url="http://minio:9000")
    for master in ("yarn", "k8s://https://kube:6443"):
        with pytest.raises(ConfigError, match="storage connection holds a secret key.*IAM role"):
            refuse_credentials_on_the_command_line(master, plain, "p", keys)
        refuse_credentials_on_the_command_line(master, plain, "p", ObjectStore(region="eu-west-1"))  # a role
    refuse_credentials_on_the_command_line("spark://master:7077", plain, "p", keys)
