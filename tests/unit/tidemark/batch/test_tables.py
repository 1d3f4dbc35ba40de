"""What a keyed table's commit of a batch says (tidemark.batch.tables): the rows its MERGE inserted, updated and
deleted from Delta's operation metrics (``row_changes``, pure, on commit infos as Delta 4.4 writes them), and the
one history scan that finds the batch's commit (``keyed_commit``) on a Delta log read by delta-rs. The commits
Spark really makes are read in tests/integration/test_keyed_tables.py."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tidemark.batch.plan import METADATA_KEY
from tidemark.batch.tables import keyed_commit, output_version, row_changes
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.state import RowChanges

# Trimmed from a keyed table's log written by Spark 4.2 with Delta 4.4 (the metrics are strings there).
MERGE = {"operation": "MERGE", "operationMetrics": {
    "numTargetRowsCopied": "0", "numTargetRowsDeleted": "1", "numTargetRowsMatchedUpdated": "1",
    "numTargetRowsMatchedDeleted": "1", "numTargetRowsUpdated": "1", "numTargetRowsInserted": "2",
    "numSourceRows": "4", "numOutputRows": "3"}}
CREATE = {"operation": "WRITE", "operationParameters": {"mode": "Append"},
          "operationMetrics": {"numFiles": "1", "numOutputRows": "2", "numOutputBytes": "3969"}}


@pytest.mark.parametrize(("commit", "changes"), [
    (MERGE, RowChanges(inserted=2, updated=1, deleted=1)),
    (CREATE, RowChanges(inserted=2, updated=0, deleted=0)),  # the append that creates the table inserts only
    ({**MERGE, "operationMetrics": {k: "0" for k in MERGE["operationMetrics"]}}, RowChanges(0, 0, 0)),  # a replay
    ({"operation": "MERGE"}, None),  # metrics off (spark.databricks.delta.history.metricsEnabled=false)
    ({"operation": "MERGE", "operationMetrics": {"numTargetRowsInserted": "1"}}, None),
    ({"operation": "OPTIMIZE", "operationMetrics": {"numAddedFiles": "1"}}, None),
])
def test_row_changes_from_a_commits_operation_metrics(commit, changes):
    assert row_changes(commit) == changes


def _commit(log, version: int, info: dict, pipeline: str | None = None, batch_id: int | None = None) -> None:
    """A commit as Spark writes a keyed batch's: the marker (txn) and its commit info with the batch's metadata."""
    if pipeline is not None:
        held = {"pipeline": pipeline, "batch_id": batch_id, "ranges": [], "records": {f"{pipeline}:0": 3}}
        info = {**info, "userMetadata": json.dumps({METADATA_KEY: held})}
    actions = [{"commitInfo": {"timestamp": 1_795_764_370_000 + version, **info}}]
    if pipeline is not None:
        actions.append({"txn": {"appId": pipeline, "version": batch_id}})
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_keyed_commit_finds_the_batchs_commit_with_its_records_and_changes(tmp_path):
    from deltalake import write_deltalake

    uri = tmp_path / "customers"
    write_deltalake(str(uri), pa.table({"id": pa.array([1], pa.int64())}))  # version 0, by delta-rs
    log = uri / "_delta_log"
    _commit(log, 1, MERGE, "customers", 4)
    _commit(log, 2, {"operation": "OPTIMIZE", "operationMetrics": {}})  # maintenance in between
    _commit(log, 3, {**MERGE, "operationMetrics": {}}, "customers", 5)  # metrics off

    found = keyed_commit(str(uri), "customers", 4)
    assert found.records == {TP("customers", 0): 3} and found.changes == RowChanges(2, 1, 1)
    assert output_version(str(uri), "customers", 4) == 1
    assert keyed_commit(str(uri), "customers", 5).changes is None
    assert keyed_commit(str(uri), "customers", 6) is None and keyed_commit(str(uri), "other", 4) is None
    assert keyed_commit(str(uri), "customers", 4, depth=2) is None  # beyond the scan
    assert keyed_commit(str(tmp_path / "missing"), "customers", 4) is None


def test_a_batch_older_than_the_newest_commits_is_found_in_the_deeper_look(tmp_path, monkeypatch):
    from deltalake import write_deltalake

    from tidemark.batch import tables

    uri = tmp_path / "orders"
    write_deltalake(str(uri), pa.table({"id": pa.array([1], pa.int64())}))  # version 0, by delta-rs
    for version, batch_id in ((1, 7), (2, 8), (3, 9)):
        _commit(uri / "_delta_log", version, MERGE, "orders", batch_id)
    monkeypatch.setattr(tables, "RECENT_COMMITS", 1)  # the first look reads version 3 only
    assert [output_version(str(uri), "orders", b) for b in (9, 7)] == [3, 1]
    assert output_version(str(uri), "orders", 7, depth=2) is None
