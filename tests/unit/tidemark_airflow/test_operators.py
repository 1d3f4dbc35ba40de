"""The ingest operator (tidemark_airflow.operators): a terminal exit code of the job fails the task without
retries (read from spark-submit's exit code, never from an error message), and credentials never reach a
spark-submit command line on any master (the job reads them from a settings file of mode 0600)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from tidemark.errors import ConfigError, JobExit


@contextlib.contextmanager
def _settings():
    yield {"TIDEMARK_JOB_SETTINGS": "/nonexistent/settings.json"}


def _run(properties, store=None, master="local[1]"):
    """A stand-in for tidemark.run.PipelineRun with the attributes the operator reads."""
    return SimpleNamespace(name="p", kafka_properties=properties, store=store, spark_master=master,
                           config=SimpleNamespace(isolation_level="read_committed"), spark_deploy_mode=None,
                           job_environment=_settings, report=lambda: [],
                           batch_summary=lambda plan: {})


def test_the_ingest_operator_fails_fast_on_the_jobs_terminal_exit_code(monkeypatch, tmp_path):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from tidemark.batch.plan import BatchPlan
    from tidemark.kafka.offsets import OffsetRange
    from tidemark_airflow import operators
    from tidemark_spark import class_data

    plan = BatchPlan("orders", 3, "/t", "/l", [OffsetRange("orders", 0, 0, 5)])

    class TI:
        def xcom_pull(self, task_ids):
            return plan.to_json()

    monkeypatch.setattr(operators, "run_for_plan", lambda plan: _run({"bootstrap.servers": "h:1"}))
    monkeypatch.setattr(operators, "require_spark_jars", lambda: ["/j.jar"])
    for own in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR"):  # make test's class-data archive and folder
        monkeypatch.delenv(own, raising=False)
    monkeypatch.setenv("TIDEMARK_CDS_DIR", str(tmp_path / "cds"))
    started = []
    monkeypatch.setattr(class_data.subprocess, "Popen", lambda command, **options: started.append(command) or
                        SimpleNamespace(pid=1))
    operator = operators.TidemarkIngestOperator(task_id="ingest")
    jvm_options = []
    for code, expected in ((JobExit.TERMINAL, AirflowFailException), (JobExit.RETRYABLE, AirflowException)):
        def submit(self, context, code=code):  # as the provider's hook: the process, then an error without a type
            jvm_options.append(self.env_vars["SPARK_SUBMIT_OPTS"])
            self._hook = SimpleNamespace(_submit_sp=SimpleNamespace(returncode=int(code)))
            raise AirflowException("Cannot execute: spark-submit ...")
        monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
        with pytest.raises(expected) as raised:
            operator.execute({"ti": TI()})
        assert (type(raised.value) is AirflowFailException) == (expected is AirflowFailException)
        assert "TIDEMARK_JOB_SETTINGS" not in operator.env_vars  # the settings file left with the job
    # no archive yet: the first launch started the trainer (tidemark_spark.class_data_train) in the background
    # and ran without one; the second found the trainer's lock and ran without one too
    assert all("-Dlog4j2.configurationFile=" in o and "-XX:" not in o for o in jvm_options)
    assert len(started) == 1 and started[0][2] == "tidemark_spark.class_data_train"


SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAAS = f'{SCRAM} required username="a" password="canary-pass-1";'


def test_cluster_deploy_mode_is_refused_only_when_a_connection_holds_credentials():
    from tidemark.storage import ObjectStore
    from tidemark_airflow.operators import refuse_cluster_deploy_mode

    secured = _run({"bootstrap.servers": "h:9094", "sasl.jaas.config": JAAS})
    with pytest.raises(ConfigError, match="deploy-mode is 'cluster'.*client deploy mode"):
        refuse_cluster_deploy_mode("cluster", secured)
    with pytest.raises(ConfigError, match="deploy-mode is 'cluster'"):
        refuse_cluster_deploy_mode("cluster", _run({"bootstrap.servers": "h:9092"}, ObjectStore("AKIA1", "s3cret")))
    refuse_cluster_deploy_mode("cluster", _run({"bootstrap.servers": "h:9092"}, ObjectStore(region="eu-west-1")))
    for mode in (None, "client"):
        refuse_cluster_deploy_mode(mode, secured)


# Kubernetes masters need the cncf.kubernetes provider (not installed here) to build the command; the
# provider passes env_vars there as --conf spark.kubernetes.driverEnv.*, as it does for YARN.
@pytest.mark.parametrize("master", ["yarn", "spark://master:7077", "local[2]"])
def test_no_credential_reaches_the_spark_submit_command_line_on_any_master(master, monkeypatch):
    """Issue 25: on YARN and Kubernetes the Spark provider turns env_vars into --conf arguments; the job's
    environment holds only the path of its settings file (0600), which holds the credentials."""
    import json
    import stat
    from pathlib import Path

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from tidemark.batch.job_settings import SETTINGS_FILE_ENV_VAR, JobSettings
    from tidemark.storage import ObjectStore

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps({"conn_type": "spark", "host": master}))
    run = _run({"bootstrap.servers": "h:9094", "sasl.jaas.config": JAAS}, ObjectStore("AKIA1", "canary-s3-2"))
    from tidemark.batch.job_settings import settings_file

    with settings_file(JobSettings(run.kafka_properties, run.store)) as env:
        path = Path(env[SETTINGS_FILE_ENV_VAR])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert JobSettings.from_environment(env) == JobSettings(run.kafka_properties, run.store)
        hook = SparkSubmitHook(conn_id="spark_test", env_vars=env, name="tidemark-p")
        command = " ".join(hook._build_spark_submit_command("ingest.py"))
    assert "canary-pass-1" not in command and "canary-s3-2" not in command and "jaas" not in command
    assert not path.exists()  # gone with the block
