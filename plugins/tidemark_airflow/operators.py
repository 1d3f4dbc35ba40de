"""The ingest operator: SparkSubmitOperator with the frozen plan from the plan task and the Kafka
and storage credentials passed in the environment (never on the command line or in rendered
templates). Thin, as Airflow's own providers keep their operators: the pipeline's run
(``tidemark.run.PipelineRun``) owns the connections, the hook owns spark-submit."""

from __future__ import annotations

import os
import subprocess
import sys

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tidemark.batch import BatchPlan
from tidemark.connections import spark_connect_address
from tidemark.errors import JobExit
from tidemark.run import PipelineRun, refuse_cluster_deploy_mode
from tidemark.settings import require_spark_jars
from tidemark_airflow.resolver import run_for_plan
from tidemark_airflow.tasks import fail_fast_on_terminal_errors
from tidemark_spark import class_data
from tidemark_spark.submit import (
    INGEST_SCRIPT,
    connect_command,
    core_archive,
    is_spark_connect,
    job_arguments,
    job_environment,
    local_spark_env,
)


class TidemarkIngestOperator(SparkSubmitOperator):
    """Runs the ingest job (``tidemark_spark.submit.INGEST_SCRIPT``: ``spark_jobs/ingest.py`` in a checkout)
    for the batch the ``plan`` task froze and describes the committed batch in the output table's asset
    event; the DAG's success callback (``tasks.after_ingest``) then reports on ``tidemark_run`` (best
    effort). A job that ends on a
    terminal error (``JobExit.TERMINAL``: bad records under ``on_bad_record: fail``, another run
    holding the pipeline, refused credentials...) fails the task at once; any other failure is left to
    Airflow's retries."""

    ui_color = "#e8f4fd"

    def __init__(self, *, plan_task_id: str = "plan", **kwargs) -> None:
        super().__init__(application=INGEST_SCRIPT, **kwargs)
        self.plan_task_id = plan_task_id

    @fail_fast_on_terminal_errors
    def execute(self, context):
        plan = BatchPlan.from_json(context["ti"].xcom_pull(task_ids=self.plan_task_id))
        self.log.info("ingesting batch %d of pipeline '%s': %d offsets over %d partitions%s",
                      plan.batch_id, plan.pipeline, plan.total_offsets, len(plan.ranges),
                      " (recovered batch, same frozen ranges)" if plan.recovered else "")
        run = run_for_plan(plan)
        master = self._master(run)
        refuse_cluster_deploy_mode(self._deploy_mode or run.spark_deploy_mode, run)
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        self.application_args = job_arguments(plan)
        self.py_files = core_archive()  # the core for executors on other machines
        self.jars = ",".join(require_spark_jars())
        self._bootstrap_servers = run.kafka_properties.get("bootstrap.servers", "")
        given = dict(self.env_vars or {})
        with run.job_environment() as job_env:  # only the settings file's path: safe on any master's command line
            self.env_vars = {**local_spark_env(), **given, **job_env}
            submit_env = {**os.environ, **self.env_vars}  # what the hook's spark-submit runs with
            sharing = (class_data.ClassData() if is_spark_connect(master) else
                       class_data.prepare(submit_env, master, self.conf or {}, self.jars.split(",")))
            self.env_vars.update(sharing.added_to(submit_env))
            code = None
            try:
                code, result = self._launch(context, plan, master)
            finally:
                self.env_vars = given
                sharing.finish(-1 if code is None else code)  # -1: no exit code (the task was killed)
        if code == JobExit.TERMINAL:
            raise AirflowFailException(
                f"pipeline '{plan.pipeline}': batch {plan.batch_id} failed on an error that a retry cannot fix "
                f"(see the job's log above); not retrying")
        if code != JobExit.OK:
            raise AirflowException(f"pipeline '{plan.pipeline}': the ingest job of batch {plan.batch_id} exited with "
                                   f"{code}; Airflow retries it (the same frozen ranges)")
        self.describe_asset_events(context, run, plan)
        self.tidemark_run, self.tidemark_batch_id = run, plan.batch_id  # for the report, after the success
        return result

    def _master(self, run: PipelineRun) -> str:
        return run.spark_master  # the plan task checked that the connection exists (check_spark_connection)

    def _launch(self, context, plan: BatchPlan, master: str) -> tuple[int, object]:
        """Run the job; returns its exit code (``JobExit``) and the provider's result."""
        if is_spark_connect(master):
            return self.run_on_spark_connect(plan, master), None
        try:
            return JobExit.OK, super().execute(context)
        except AirflowException:
            code = self._spark_submit_exit_code()
            if code is None:
                raise
            return code, None
        finally:
            self._hook = None  # it holds a copy of the secrets

    def _spark_submit_exit_code(self) -> int | None:
        """spark-submit's exit code, from the process the provider's hook ran (its exception carries the
        code only inside its message); None when no job ran."""
        process = getattr(self._hook, "_submit_sp", None)
        return getattr(process, "returncode", None)

    def run_on_spark_connect(self, plan: BatchPlan, url: str) -> int:
        """The warm path (a ``spark_connect`` Spark connection): the job runs as a Spark Connect
        client in a child process of this task (its own interpreter, so a kill -9 of the job is what
        it would be under spark-submit), its output in this task's log; no JVM is started."""
        self.log.info("pipeline '%s': running the ingest job on the Spark Connect server %s (no spark-submit)",
                      plan.pipeline, spark_connect_address(url))
        env = job_environment(url, self.env_vars)
        self._connect_job = subprocess.Popen(connect_command(plan), env=env,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self._connect_job.stdout:
            self.log.info("%s", line.rstrip())
        return self._connect_job.wait()

    def on_kill(self) -> None:
        job = getattr(self, "_connect_job", None)
        if job is None:
            super().on_kill()
        elif job.poll() is None:
            job.kill()

    def describe_asset_events(self, context, run: PipelineRun, plan: BatchPlan) -> None:
        """The output table's asset event (emitted when this task succeeds) carries what the batch
        committed: pipeline, batch id, ranges, record and dead-letter counts, Delta version. The batch
        is committed by now: a failure to describe it only thins the event, never fails the task."""
        try:
            summary = run.batch_summary(plan)
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
