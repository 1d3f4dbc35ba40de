"""The ingest operator: SparkSubmitOperator with the frozen plan from the plan task and the Kafka
credentials passed in the environment (never on the command line or in rendered templates)."""

from __future__ import annotations

import json
import os
import sys

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tidemark import storage
from tidemark.batch import BatchPlan, batch_summary
from tidemark.config import find_pipeline
from tidemark.connections import spark_connect_address
from tidemark.errors import ConfigError, TidemarkError
from tidemark.settings import require_spark_jars
from tidemark_airflow.connections import kafka_properties, object_store, spark_master
from tidemark_airflow.tasks import report
from tidemark_spark.ingest import TERMINAL_EXIT_CODE
from tidemark_spark.submit import INGEST_SCRIPT, core_archive, is_spark_connect, job_arguments, local_spark_env


def refuse_credentials_on_the_command_line(master: str, properties: dict[str, str], pipeline: str,
                                          store: storage.ObjectStore | None = None) -> None:
    """On YARN and Kubernetes masters the Spark provider turns ``env_vars`` into ``--conf
    spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*`` arguments of spark-submit, where
    ``ps`` and the Spark event log show them: refuse rather than expose Kafka or storage credentials
    (on those masters, give the nodes an instance role or IRSA and leave the connection's keys empty)."""
    from tidemark.kafka_client import secret_values

    if "yarn" not in master and "k8s" not in master:
        return
    if secret_values(properties):
        raise ConfigError(f"the Kafka connection holds credentials and the Spark master '{master}' would receive "
                          f"them on the spark-submit command line; run the ingest job on a local or standalone "
                          f"master (client mode)", pipeline=pipeline)
    if store is not None and store.secrets():
        raise ConfigError(f"the storage connection holds a secret key and the Spark master '{master}' would "
                          f"receive it on the spark-submit command line; leave the connection's keys empty and "
                          f"give the cluster's nodes an IAM role, or run on a local or standalone master",
                          pipeline=pipeline)


# The job's environment variables that hold credentials (Kafka properties, object-store keys).
SECRET_ENV_VARS = ("TIDEMARK_KAFKA_PROPERTIES", storage.ENV_VAR)


class TidemarkIngestOperator(SparkSubmitOperator):
    """Runs the ingest job (``tidemark_spark/ingest.py``) for the batch the ``plan`` task froze, then
    reports (offsets mirrored to the consumer group, lag logged; best effort). A job that ends on a
    terminal error (exit code ``TERMINAL_EXIT_CODE``: bad records under
    ``on_bad_record: fail``, another run holding the pipeline, refused credentials...) fails the
    task at once; any other failure is left to Airflow's retries."""

    ui_color = "#e8f4fd"

    def __init__(self, *, kafka_conn_id: str, isolation_level: str, plan_task_id: str = "plan",
                 storage_conn_id: str = storage.DEFAULT_CONN_ID, **kwargs) -> None:
        super().__init__(application=INGEST_SCRIPT, **kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.storage_conn_id = storage_conn_id
        self.isolation_level = isolation_level
        self.plan_task_id = plan_task_id

    def execute(self, context):
        plan = BatchPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        self.log.info("ingesting batch %d of pipeline '%s': %d offsets over %d partitions%s",
                      plan.batch_id, plan.pipeline, plan.total_offsets, len(plan.ranges),
                      " (recovered batch, same frozen ranges)" if plan.recovered else "")
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        self.application_args = job_arguments(plan, self.isolation_level)
        self.py_files = core_archive()  # the core for executors on other machines
        self.jars = ",".join(require_spark_jars())
        properties = kafka_properties(self.kafka_conn_id, plan.pipeline)
        self._bootstrap_servers = properties.get("bootstrap.servers", "")
        try:
            master = spark_master(self._conn_id, plan.pipeline)
        except ConfigError:
            master = "yarn"  # what the Spark provider falls back to without a connection
        tables = (plan.table_uri, plan.dead_letter_uri, plan.ledger_uri)
        store = (object_store(self.storage_conn_id, plan.pipeline)
                 if any(storage.is_object_store(uri) for uri in tables) else None)
        refuse_credentials_on_the_command_line(master, properties, plan.pipeline, store)
        self.env_vars = {**local_spark_env(), **(self.env_vars or {}),
                         SECRET_ENV_VARS[0]: json.dumps(properties)}
        if store is not None:
            self.env_vars[storage.ENV_VAR] = store.to_json()
        try:
            if is_spark_connect(master):
                result = self.run_on_spark_connect(plan, master, properties)
            else:
                result = super().execute(context)
        except AirflowException as exc:
            if f"Error code is: {TERMINAL_EXIT_CODE}." in str(exc):
                raise AirflowFailException(
                    f"pipeline '{plan.pipeline}': batch {plan.batch_id} failed on an error that a retry cannot fix "
                    f"(see the job's log above); not retrying") from None
            raise
        finally:  # the secrets leave the operator with the job: listeners (OpenLineage) read it afterwards
            self.env_vars = {k: v for k, v in self.env_vars.items() if k not in SECRET_ENV_VARS}
            self._hook = None  # it holds a copy
        storage.configure(store)
        self.describe_asset_events(context, plan)
        try:
            config = find_pipeline(plan.pipeline)
        except TidemarkError as exc:  # the batch is committed: the report is best effort
            self.log.warning("pipeline '%s': batch %d is committed; no offset report (%s)", plan.pipeline,
                             plan.batch_id, exc)
        else:
            report(config, properties)
        return result

    def run_on_spark_connect(self, plan: BatchPlan, url: str, properties: dict[str, str]) -> None:
        """The warm path (a ``spark_connect`` Spark connection): the job runs as a Spark Connect
        client in a child process of this task (its own interpreter, so a kill -9 of the job is what
        it would be under spark-submit), its output in this task's log; no JVM is started."""
        import subprocess

        from tidemark_spark.submit import connect_command, job_environment

        self.log.info("pipeline '%s': running the ingest job on the Spark Connect server %s (no spark-submit)",
                      plan.pipeline, spark_connect_address(url))
        env = job_environment(properties, url, self.env_vars)
        self._connect_job = subprocess.Popen(connect_command(plan, self.isolation_level), env=env,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self._connect_job.stdout:
            self.log.info("%s", line.rstrip())
        code = self._connect_job.wait()
        if code != 0:
            raise AirflowException(f"the ingest job on Spark Connect failed. Error code is: {code}.")

    def on_kill(self) -> None:
        job = getattr(self, "_connect_job", None)
        if job is None:
            super().on_kill()
        elif job.poll() is None:
            job.kill()

    def describe_asset_events(self, context, plan: BatchPlan) -> None:
        """The output table's asset event (emitted when this task succeeds) carries what the batch
        committed: pipeline, batch id, ranges, record and dead-letter counts, Delta version. The batch
        is committed by now: a failure to describe it only thins the event, never fails the task."""
        try:
            summary = batch_summary(plan)
        except Exception as exc:  # the data is committed; the event still says which batch
            self.log.warning("pipeline '%s': could not summarise batch %d for its asset event: %s", plan.pipeline,
                             plan.batch_id, exc)
            summary = {"pipeline": plan.pipeline, "batch_id": plan.batch_id, "table": plan.table_uri}
        self._committed = (plan, summary)
        for outlet in self.outlets:
            context["outlet_events"][outlet].extra = summary
        self.log.info("pipeline '%s': batch %d committed %s records and %s dead letters (Delta version %s)",
                      plan.pipeline, plan.batch_id, summary.get("records"), summary.get("dead_letters"),
                      summary.get("delta_version"))

    def get_openlineage_facets_on_complete(self, task_instance):
        """OpenLineage (called by the provider's listener after a successful run): the batch's
        topics as inputs, the output table (and the dead letters, when it wrote some) as outputs, the
        committed batch as the ``tidemark_batch`` run facet."""
        from tidemark_airflow.lineage import batch_lineage

        if getattr(self, "_committed", None) is None:  # nothing committed by this task
            from airflow.providers.openlineage.extractors import OperatorLineage

            return OperatorLineage()
        plan, summary = self._committed
        topics = sorted({r.topic for r in plan.ranges})
        return batch_lineage(summary, topics, self._bootstrap_servers, plan.dead_letter_uri)
