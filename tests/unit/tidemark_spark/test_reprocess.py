"""Launching the reprocess job (tidemark_spark.reprocess.launch) the way `tidemark run` launches the ingest job:
spark-submit with the core on --py-files, or a Spark Connect client; the plan on the command line holds no
secret (the connection's password reaches the job in its settings file only)."""

from __future__ import annotations

import json

import pytest

from tidemark.batch.job_settings import SETTINGS_FILE_ENV_VAR
from tidemark.config.pipeline import parse_pipeline
from tidemark.connections import EnvironmentResolver
from tidemark.kafka.offsets import OffsetRange
from tidemark.operations.reprocessing import ReprocessPlan
from tidemark.run import PipelineRun


@pytest.mark.parametrize("spark", [{"conn_type": "spark", "host": "local[2]"},
                                   {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002}])
def test_the_job_is_launched_with_its_plan_and_its_settings_file_only(spark, monkeypatch, tmp_path):
    from tidemark_spark import reprocess, submit

    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "127.0.0.1:9092", "sasl.jaas.config": 'x required username="u" password="s3cret";'}}))
    config = parse_pipeline({"name": "p", "topics": ["t"], "table": "out"}, "test")
    run = PipelineRun(config, EnvironmentResolver(), str(tmp_path / "ledger"), None)
    plan = ReprocessPlan("p", 3, config.table_uri, config.dead_letter_uri, run.ledger_uri, [OffsetRange("t", 0, 2, 8)])
    seen = {}

    def call(command, env, stdout=None):
        seen.update(command=command, settings=open(env[SETTINGS_FILE_ENV_VAR]).read(), env=env)
        return 0

    monkeypatch.setattr(submit.subprocess, "call", call)
    assert reprocess.launch(run, plan) == 0
    command = seen["command"]
    assert command[-3:] == [reprocess.SCRIPT, "--plan", plan.to_json()]
    assert "s3cret" not in " ".join(command) and "s3cret" in seen["settings"]
    if spark["conn_type"] == "spark":
        assert command[0].endswith("spark-submit") and "--py-files" in command and "local[2]" in command
    else:
        assert seen["env"]["TIDEMARK_SPARK_REMOTE"].startswith("sc://127.0.0.1:15002")
