"""The ingest operator: SparkSubmitOperator with the frozen plan from the plan task and the Kafka
credentials passed in the environment (never on the command line or in rendered templates)."""

from __future__ import annotations

import json
import os
import sys

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tidemark.batch.plan import BatchPlan
from tidemark.errors import ConfigError
from tidemark.settings import require_spark_jars
from tidemark_airflow.connections import kafka_properties, spark_master
from tidemark_spark.ingest import TERMINAL_EXIT_CODE
from tidemark_spark.submit import INGEST_SCRIPT, core_archive, local_spark_env


def refuse_credentials_on_the_command_line(master: str, properties: dict[str, str], pipeline: str) -> None:
    """On YARN and Kubernetes masters the Spark provider turns ``env_vars`` into ``--conf
    spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*`` arguments of spark-submit, where
    ``ps`` and the Spark event log show them: refuse rather than expose Kafka credentials."""
    from tidemark.kafka_client import secret_values

    if ("yarn" in master or "k8s" in master) and secret_values(properties):
        raise ConfigError(f"the Kafka connection holds credentials and the Spark master '{master}' would receive "
                          f"them on the spark-submit command line; run the ingest job on a local or standalone "
                          f"master (client mode)", pipeline=pipeline)


class TidemarkIngestOperator(SparkSubmitOperator):
    """Runs the ingest job (``tidemark_spark/ingest.py``) for the batch the ``plan`` task froze. A
    job that ends on a terminal error (exit code ``TERMINAL_EXIT_CODE``: bad records under
    ``on_bad_record: fail``, another run holding the pipeline, refused credentials...) fails the
    task at once; any other failure is left to Airflow's retries."""

    ui_color = "#e8f4fd"

    def __init__(self, *, kafka_conn_id: str, isolation_level: str, plan_task_id: str = "plan",
                 **kwargs) -> None:
        super().__init__(application=INGEST_SCRIPT, **kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.isolation_level = isolation_level
        self.plan_task_id = plan_task_id

    def execute(self, context):
        plan = BatchPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        self.log.info("ingesting batch %d of pipeline '%s': %d offsets over %d partitions%s",
                      plan.batch_id, plan.pipeline, plan.total_offsets, len(plan.ranges),
                      " (recovered batch, same frozen ranges)" if plan.recovered else "")
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        self.application_args = ["--plan", plan.to_json(), "--isolation-level", self.isolation_level]
        self.py_files = core_archive()  # the core for executors on other machines
        self.jars = ",".join(require_spark_jars())
        properties = kafka_properties(self.kafka_conn_id, plan.pipeline)
        try:
            master = spark_master(self._conn_id, plan.pipeline)
        except ConfigError:
            master = "yarn"  # what the Spark provider falls back to without a connection
        refuse_credentials_on_the_command_line(master, properties, plan.pipeline)
        self.env_vars = {**local_spark_env(), **(self.env_vars or {}),
                         "TIDEMARK_KAFKA_PROPERTIES": json.dumps(properties)}
        try:
            return super().execute(context)
        except AirflowException as exc:
            if f"Error code is: {TERMINAL_EXIT_CODE}." in str(exc):
                raise AirflowFailException(
                    f"pipeline '{plan.pipeline}': batch {plan.batch_id} failed on an error that a retry cannot fix "
                    f"(see the job's log above); not retrying") from None
            raise
