"""`tidemark maintain PIPELINE` (tidemark_cli.maintenance_commands) against a real Delta table (delta-rs, the local
disk):
the maintenance DAG's steps, run once from the command line."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from tidemark_cli.main import main


@pytest.fixture
def orders(tmp_path, monkeypatch):
    """Pipeline 'orders' with `maintenance:`, its output table written by 4 small batches (4 files)."""
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    (pipelines / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\nmaintenance:\n"
                                           "  optimize_every: 24h\n  vacuum_retain: 168h\n")
    monkeypatch.setenv("TIDEMARK_PIPELINES_DIR", str(pipelines))
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(lake))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    for batch in range(1, 5):
        rows = pa.table({"kafka_partition": pa.array([0, 1], pa.int32()),
                         "kafka_offset": pa.array([batch * 10, batch * 10 + 1], pa.int64()),
                         "ingest_batch_id": pa.array([batch] * 2, pa.int64())})
        write_deltalake(str(lake / "orders"), rows, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction("orders", batch)]))
    return lake / "orders"


def test_maintain_compacts_the_output_and_prints_what_it_did_per_table(orders, capsys):
    assert len(DeltaTable(str(orders)).file_uris()) == 4
    assert main(["maintain", "orders"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["TABLE", "LOCATION", "FILES_BEFORE", "FILES_AFTER", "VACUUMED_FILES",
                              "CHECKPOINT_VERSION"]
    table = DeltaTable(str(orders))
    assert out[1].split() == ["output", str(orders), "4", "1", "0", str(table.version())]
    assert out[2].split()[0] == "dead_letters" and out[2].split()[2:] == ["-", "-", "0", "-"]  # no such table yet
    assert out[3].split()[0] == "ledger" and out[3].split()[2:] == ["-", "-", "0", "-"]  # no ledger yet
    assert out[4].startswith("pipeline 'orders': maintained")
    assert len(table.file_uris()) == 1 and table.count() == 8 and table.transaction_version("orders") == 4


def test_maintain_json_is_the_dags_report(orders, capsys):
    assert main(["maintain", "orders", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pipeline"] == "orders" and report["output"]["table"] == str(orders)
    assert (report["output"]["optimize"]["files_before"], report["output"]["optimize"]["files_after"]) == (4, 1)
    assert report["ledger"]["checkpoint_version"] is None  # no ledger yet


def test_maintain_without_a_maintenance_block_is_refused(orders, capsys):
    (orders.parent.parent / "pipelines" / "orders.yaml").write_text("name: orders\ntopics: [orders]\ntable: orders\n")
    assert main(["maintain", "orders"]) == 2
    assert "pipeline 'orders': has no 'maintenance:' in its pipeline file" in capsys.readouterr().err
    assert len(DeltaTable(str(orders)).file_uris()) == 4
