"""The maintenance DAG (issue 27 item 1): one per pipeline whose file has ``maintenance:``, scheduled every
``optimize_every``, one task; none for the others; a too-short VACUUM retention is an import error naming the
pipeline, the field and the floor, and the other pipelines still load."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_maintenance_dag_per_pipeline_that_asks_for_one(tmp_path, monkeypatch):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\nmaintenance:\n"
                                        "  optimize_every: 24h\n  zorder_by: [kafka_partition, kafka_offset]\n"
                                        "  vacuum_retain: 168h\n")
    (folder / "plain.yaml").write_text("name: plain\ntopics: [plain]\ntable: plain\n")
    (folder / "short.yaml").write_text("name: short\ntopics: [short]\ntable: short\nmaintenance:\n"
                                       "  optimize_every: 1h\n  vacuum_retain: 24h\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(folder))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT",  # unreachable on purpose: parsing talks to nothing
                       json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert sorted(d for d in bag.dags if "maintenance" in d) == ["tidemark_maintenance__orders"]
    assert "tidemark_ingest__plain" in bag.dags and "tidemark_ingest__short" not in bag.dags
    dag = bag.dags["tidemark_maintenance__orders"]
    assert [t.task_id for t in dag.tasks] == ["maintain"] and dag.max_active_runs == 1 and not dag.catchup
    assert dag.timetable.delta == dt.timedelta(hours=24)
    assert "Z-ordered by kafka_partition, kafka_offset" in dag.doc_md and "VACUUM retaining 7 days" in dag.doc_md
    assert list(bag.import_errors) == [str(ROOT / "dags" / "tidemark_pipeline_errors.py")]
    assert "short.yaml: pipeline 'short': maintenance.vacuum_retain is 24h, shorter than the floor of 168h" in \
        next(iter(bag.import_errors.values()))
    assert not (tmp_path / "lake").exists()
