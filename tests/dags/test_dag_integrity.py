"""The DAG folder parses, one DAG per pipeline, with no Kafka, Delta or Spark call at parse time."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "pipelines"


@pytest.fixture
def dagbag(tmp_path, monkeypatch):
    def load(*pipeline_files: Path):
        folder = tmp_path / "pipelines"
        folder.mkdir(exist_ok=True)
        for f in pipeline_files:
            shutil.copy(f, folder / f.name)
        monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(folder))
        monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
        # Unreachable on purpose: parsing must not talk to Kafka.
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",
                           json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}))
        from airflow.dag_processing.dagbag import DagBag

        return DagBag(dag_folder=str(ROOT / "dags"))

    return load


EXAMPLE = "tidemark_example_downstream__orders"  # dags/tidemark_downstream_example.py, on the demo's table


def test_one_dag_per_pipeline_and_no_import_errors(dagbag):
    bag = dagbag(FIXTURES / "good" / "orders.yaml", FIXTURES / "good" / "payments.yaml")
    assert bag.import_errors == {}
    assert sorted(bag.dags) == [EXAMPLE, "tidemark_ingest__orders", "tidemark_ingest__payments",
                                "tidemark_replay__orders", "tidemark_replay__payments"]
    replay = bag.dags["tidemark_replay__orders"]
    assert replay.params["dry_run"] is True and replay.schedule is None
    dag = bag.dags["tidemark_ingest__orders"]
    assert dag.max_active_runs == 1
    assert "tidemark" in dag.tags
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "ingest"]  # each launch costs a process start
    assert dag.get_task("plan").retries == 2
    plan = dag.get_task("plan")  # each retry waits twice as long as the last, at most 10 minutes
    assert plan.retry_exponential_backoff and plan.max_retry_delay == dt.timedelta(minutes=10)
    assert "orders" in dag.doc_md


def test_the_ingest_task_declares_the_output_table_as_an_asset_and_the_example_is_scheduled_on_it(dagbag, tmp_path):
    bag = dagbag(FIXTURES / "good" / "orders.yaml")
    ingest = bag.dags["tidemark_ingest__orders"].get_task("ingest")
    assert [(a.name, a.uri, a.extra["table"]) for a in ingest.outlets] == [
        ("tidemark/orders", "tidemark://pipelines/orders", (tmp_path / "lake" / "orders").as_uri())]
    assert bag.dags["tidemark_ingest__orders"].get_task("plan").outlets == []
    assert [ref.name for ref in bag.dags[EXAMPLE].timetable.asset_condition.objects] == ["tidemark/orders"]


def test_parsing_loads_no_spark_kafka_or_delta_client(tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    shutil.copy(FIXTURES / "good" / "orders.yaml", folder)
    code = ("import runpy, sys, json; runpy.run_path(sys.argv[1]); "
            "print(json.dumps(sorted(m for m in ('pyspark', 'kafka', 'deltalake') if m in sys.modules)))")
    env = {**os.environ, "TIDEMARK_PIPELINES_DIR": str(folder), "TIDEMARK_LAKE_ROOT": str(tmp_path / "lake")}
    result = subprocess.run([sys.executable, "-c", code, str(ROOT / "dags" / "tidemark_dags.py")],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
    assert not (tmp_path / "lake").exists()


def test_a_broken_pipeline_is_an_import_error_naming_file_and_field_and_the_others_load(dagbag):
    bag = dagbag(FIXTURES / "good" / "orders.yaml", FIXTURES / "good" / "payments.yaml",
                 FIXTURES / "broken" / "unknown_key.yaml", FIXTURES / "broken" / "bad_cap.yaml")
    assert sorted(bag.dags) == [EXAMPLE, "tidemark_ingest__orders", "tidemark_ingest__payments",
                                "tidemark_replay__orders", "tidemark_replay__payments"]
    assert list(bag.import_errors) == [str(ROOT / "dags" / "tidemark_pipeline_errors.py")]
    message = next(iter(bag.import_errors.values()))
    assert "2 broken pipeline file(s)" in message
    assert "unknown_key.yaml: unknown key 'colour'" in message
    assert "bad_cap.yaml: 'max_offsets_per_run'" in message


def test_the_trigger_form_validates_with_json_schema(dagbag):
    from airflow.sdk import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    bag = dagbag(FIXTURES / "good" / "orders.yaml")
    form = bag.dags["tidemark_ingest__orders"].params
    assert form["mode"] == "incremental" and form["on_empty_window"] == "skip"

    def validate(**values):
        params = ParamsDict({k: form.get_param(k) for k in form})
        for key, value in values.items():
            params[key] = value
        return params.validate()

    assert validate(mode="capped", max_records=100)["max_records"] == 100
    assert validate(mode="backfill_offsets", offsets=[{"topic": "orders", "partition": 0, "start": 1, "end": 5}])
    # a window's bounds carry their zone (docs/OPERATIONS.md): Airflow refuses one without
    assert validate(mode="backfill_window", window_start="2026-11-01T00:00:00Z",
                    window_end="2026-11-02T00:00:00+01:00")["window_end"] == "2026-11-02T00:00:00+01:00"
    for bad in ({"window_start": "2026-11-01T00:00:00"}, {"window_start": "2026-11-01"},
                {"mode": "turbo"}, {"max_records": 0}, {"max_records": "ten"}, {"on_empty_window": "maybe"},
                {"offsets": [{"topic": "orders", "partition": -1, "start": 0, "end": 1}]},
                {"offsets": [{"topic": "orders", "partition": 0, "start": 0}]}):
        with pytest.raises(ParamValidationError):
            validate(**bad)


def test_scheduled_dags_have_data_intervals_for_native_backfill(dagbag):
    bag = dagbag(FIXTURES / "good" / "payments.yaml")
    timetable = bag.dags["tidemark_ingest__payments"].timetable
    assert type(timetable).__name__ == "CronDataIntervalTimetable"


def test_the_scheduled_audit_is_a_dag_of_its_own_only_when_the_file_asks_for_it(dagbag, tmp_path):
    audited = tmp_path / "audited.yaml"
    audited.write_text("name: audited\ntopics: [a]\ntable: a\naudit: {every: 24h, verify_sample: 3}\n")
    bag = dagbag(FIXTURES / "good" / "orders.yaml", audited)
    assert bag.import_errors == {}
    assert "tidemark_audit__orders" not in bag.dags  # off by default
    dag = bag.dags["tidemark_audit__audited"]
    assert dag.max_active_runs == 1 and "audit" in dag.tags and "tidemark audit audited" in dag.doc_md
    assert dag.timetable.delta == dt.timedelta(hours=24)
    task = dag.get_task("audit")
    assert [t.task_id for t in dag.tasks] == ["audit"]
    assert task.op_kwargs == {"pipeline": "audited", "verify_sample": 3}


def test_the_audit_dag_of_a_transformed_pipeline_reads_no_sample_again():
    """A sample compares the table's values with Kafka's, and a transform's output is not Kafka's values: the audit
    DAG of a pipeline with a transform passes no sample, even from a config that somehow holds one."""
    from tidemark.config.audit_schedule import AuditSchedule
    from tidemark.config.pipeline import parse_pipeline
    from tidemark_airflow.dag_builder import build_audit_dag

    config = parse_pipeline({"name": "shop", "topics": ["shop"], "table": "shop", "audit": {"every": "24h"},
                             "transform": "SELECT * FROM records WHERE kafka_offset % 2 = 0"}, "shop.yaml")
    sampled = config.model_copy(update={"audit": AuditSchedule(every="24h", verify_sample=3)})  # not validated
    dag = build_audit_dag(sampled)
    assert dag.get_task("audit").op_kwargs == {"pipeline": "shop", "verify_sample": 0}
    assert "read again from Kafka" not in dag.doc_md
