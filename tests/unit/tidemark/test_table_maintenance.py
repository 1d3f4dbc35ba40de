"""Table maintenance (issue 27 item 1): the ``maintenance:`` block's validation (the VACUUM floor above all),
and OPTIMIZE, VACUUM and checkpoints on small local Delta tables written by delta-rs (no service, no JVM;
tables written by Spark are maintained in tests/integration/test_maintenance.py)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.operations import table_maintenance


def pipeline(**maintenance_block) -> dict:
    return {"name": "orders", "topics": ["orders"], "table": "orders", "maintenance": maintenance_block}


def test_a_vacuum_retention_under_the_floor_is_refused_naming_pipeline_field_and_floor():
    with pytest.raises(ConfigError) as refused:
        parse_pipeline(pipeline(optimize_every="24h", vacuum_retain="24h"), "dags/pipelines/orders.yaml")
    message = str(refused.value)
    assert message.startswith("dags/pipelines/orders.yaml: pipeline 'orders': maintenance.vacuum_retain is 24h, "
                              "shorter than the floor of 168h (7 days")
    assert "Use 168h or more, or leave vacuum_retain out" in message


@pytest.mark.parametrize("retain", ["167h", "6d", "0h"])
def test_every_retention_shorter_than_seven_days_is_refused(retain):
    with pytest.raises(ConfigError, match="maintenance.vacuum_retain .* shorter than the floor of 168h"):
        parse_pipeline(pipeline(optimize_every="1h", vacuum_retain=retain), "test")


def test_the_floor_and_longer_retentions_are_accepted_and_vacuum_is_off_without_one():
    assert parse_pipeline(pipeline(optimize_every="24h", vacuum_retain="168h"), "t").maintenance.vacuum_retain == \
        dt.timedelta(days=7)
    assert parse_pipeline(pipeline(optimize_every="1d", vacuum_retain="30d"), "t").maintenance.vacuum_retain == \
        dt.timedelta(days=30)
    settings = parse_pipeline(pipeline(optimize_every="6h"), "t").maintenance
    assert (settings.optimize_every, settings.vacuum_retain, settings.zorder_by) == (dt.timedelta(hours=6), None, [])
    assert parse_pipeline({"name": "o", "topics": ["o"], "table": "o"}, "t").maintenance is None


@pytest.mark.parametrize(("block", "extra", "message"), [
    ({"optimize_every": "24h", "zorder_by": ["nope"]}, {},
     "pipeline 'orders': maintenance.zorder_by: 'nope' is not an output column (one of kafka_topic"),
    ({"optimize_every": "24h", "zorder_by": ["kafka_date"]}, {"partition_by": ["kafka_date"]},
     "maintenance.zorder_by: 'kafka_date' is a partition column"),
    ({"optimize_every": "24h", "zorder_by": ["kafka_offset", "kafka_offset"]}, {}, "lists a column more than once"),
    ({"optimize_every": "30s"}, {}, "'maintenance.optimize_every': must be at least 1m"),
    ({"optimize_every": "daily"}, {}, "'maintenance.optimize_every': 'daily' is not a duration"),
    ({"zorder_by": ["kafka_offset"]}, {}, "'maintenance.optimize_every' is required"),
    ({"optimize_every": "1h", "vacuum": True}, {}, "unknown key 'maintenance.vacuum'"),
])
def test_a_broken_maintenance_block_names_its_field(block, extra, message):
    with pytest.raises(ConfigError) as refused:
        parse_pipeline({**pipeline(**block), **extra}, "test")
    assert message in str(refused.value)


def test_zorder_columns_may_be_payload_fields_and_avro_fields_wait_for_the_table():
    json_pipeline = {**pipeline(optimize_every="1d", zorder_by=["customer", "kafka_offset"]), "value_format": "json",
                     "value_schema": {"customer": "string"}}
    assert parse_pipeline(json_pipeline, "t").maintenance.zorder_by == ["customer", "kafka_offset"]
    avro = {**pipeline(optimize_every="1d", zorder_by=["any_field"]), "value_format": "avro"}
    assert parse_pipeline(avro, "t").maintenance.zorder_by == ["any_field"]


@pytest.mark.parametrize(("value", "expected"), [
    ("interval 30 days", dt.timedelta(days=30)), ("INTERVAL 1 WEEK", dt.timedelta(weeks=1)),
    ("interval 36 hours", dt.timedelta(hours=36)), (None, None), ("30 days", None)])
def test_a_tables_own_retention_property_is_read(value, expected):
    assert table_maintenance.table_retention(value) == expected


def small_batches(uri: str, batches: int, configuration: dict | None = None) -> None:
    """``batches`` appends of 5 rows, each with the pipeline's marker as Spark's writes carry it."""
    for batch in range(1, batches + 1):
        rows = pa.table({"kafka_partition": pa.array([0, 1, 0, 1, 0], pa.int32()),
                         "kafka_offset": pa.array([batch * 10 + i for i in range(5)], pa.int64()),
                         "ingest_batch_id": pa.array([batch] * 5, pa.int64())})
        write_deltalake(uri, rows, mode="append", configuration=configuration if batch == 1 else None,
                        commit_properties=CommitProperties(app_transactions=[Transaction("orders", batch)]))


def test_optimize_compacts_z_orders_and_keeps_rows_and_marker(tmp_path):
    uri = str(tmp_path / "orders")
    small_batches(uri, 6)
    rows_before = DeltaTable(uri).to_pyarrow_table().sort_by("kafka_offset")
    done = table_maintenance.optimize(uri, None, "orders")
    assert (done["files_before"], done["files_after"], done["attempts"]) == (6, 1, 1)
    zordered = table_maintenance.optimize(uri, None, "orders", ["kafka_partition", "kafka_offset"])
    assert zordered["numFilesRemoved"] == 1 and zordered["files_after"] == 1
    table = DeltaTable(uri)
    assert table.to_pyarrow_table().sort_by("kafka_offset") == rows_before
    assert table.transaction_version("orders") == 6
    assert table_maintenance.optimize(str(tmp_path / "none"), None, "orders") == {}


def test_optimize_refuses_a_zorder_column_the_table_lacks(tmp_path):
    uri = str(tmp_path / "orders")
    small_batches(uri, 2)
    with pytest.raises(ConfigError, match="zorder_by names customer, not a column of the output table"):
        table_maintenance.optimize(uri, None, "orders", ["customer"])


def test_vacuum_refuses_a_retention_under_the_tables_own_and_deletes_nothing(tmp_path):
    uri = str(tmp_path / "orders")
    small_batches(uri, 3, configuration={"delta.deletedFileRetentionDuration": "interval 30 days"})
    table_maintenance.optimize(uri, None, "orders")
    files = sorted(p.name for p in (tmp_path / "orders").glob("*.parquet"))
    with pytest.raises(ConfigError) as refused:
        table_maintenance.vacuum(uri, None, "orders", dt.timedelta(days=7))
    assert "pipeline 'orders': maintenance.vacuum_retain is 168h, shorter than the table's " \
           "delta.deletedFileRetentionDuration of 720h" in str(refused.value)
    assert sorted(p.name for p in (tmp_path / "orders").glob("*.parquet")) == files
    assert table_maintenance.vacuum(uri, None, "orders", dt.timedelta(days=30)) == []  # the replaced files are new


def test_vacuum_deletes_only_replaced_files_and_a_checkpoint_keeps_the_marker(tmp_path):
    uri = str(tmp_path / "orders")
    small_batches(uri, 4)
    table_maintenance.optimize(uri, None, "orders")
    deleted = table_maintenance.vacuum(uri, None, "orders", dt.timedelta(0), floor=dt.timedelta(0))
    assert len(deleted) == 4
    assert len(list((tmp_path / "orders").glob("*.parquet"))) == 1
    version = table_maintenance.checkpoint(uri, None, "orders")
    assert (tmp_path / "orders" / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    table = DeltaTable(uri)
    assert table.transaction_version("orders") == 4 and table.count() == 20


def test_vacuum_deletes_the_part_files_a_killed_write_left_once_they_are_older_than_the_retention(tmp_path):
    """A writer killed before its commit leaves part files no version ever referenced: a full VACUUM finds
    them, but only once they are older than the retention (a running writer's files are younger)."""
    import os
    import time

    uri = str(tmp_path / "orders")
    small_batches(uri, 2)
    folder = tmp_path / "orders"
    old, new = folder / "part-00000-killed-old.parquet", folder / "part-00000-killed-new.parquet"
    for orphan in (old, new):
        orphan.write_bytes(b"PAR1 a part file of a commit that never happened")
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (eight_days_ago, eight_days_ago))
    deleted = table_maintenance.vacuum(uri, None, "orders", dt.timedelta(days=7))
    assert [os.path.basename(f) for f in deleted] == [old.name]
    assert not old.exists() and new.exists()
    assert DeltaTable(uri).count() == 10  # every committed file stays


def test_maintain_without_a_maintenance_block_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders"}, "t")
    with pytest.raises(ConfigError, match="pipeline 'orders': has no 'maintenance:'"):
        table_maintenance.maintain(config, str(tmp_path / "_tidemark" / "offsets"), None)


def test_maintain_runs_every_step_and_skips_tables_that_do_not_exist_yet(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = parse_pipeline(pipeline(optimize_every="24h", vacuum_retain="168h", zorder_by=["kafka_offset"]), "t")
    small_batches(config.table_uri, 3)
    from tidemark.run import PipelineRun

    report = PipelineRun(config, None, str(tmp_path / "_tidemark" / "offsets"), None).maintain()  # the DAG's call
    assert report["output"]["optimize"]["files_after"] == 1 and report["output"]["vacuumed_files"] == 0
    assert report["output"]["checkpoint_version"] == DeltaTable(config.table_uri).version()
    assert report["dead_letters"] == {"table": config.dead_letter_uri, "optimize": {}, "vacuumed_files": 0,
                                      "checkpoint_version": None}
    assert report["ledger"] == {"table": str(tmp_path / "_tidemark" / "offsets"), "vacuumed_files": 0,
                                "checkpoint_version": None}


def test_maintain_compacts_a_history_tables_kept_deletes(tmp_path, monkeypatch):
    """A history table keeps every delete beside it (``_tidemark_history_deletes``, a MERGE per batch that has
    deletes): maintenance compacts, vacuums and checkpoints it like the output, and changes none of its rows."""
    from tidemark.batch.spark.versions import deletes_uri
    from tidemark.run import PipelineRun

    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = parse_pipeline({**pipeline(optimize_every="24h", vacuum_retain="168h"), "value_format": "json",
                             "value_schema": {"id": "bigint", "updated_at": "timestamp", "op": "string?"},
                             "keyed": {"keys": ["id"], "order_by": ["updated_at"], "delete_field": "op",
                                       "delete_values": ["delete"], "history": "scd2"}}, "t")
    small_batches(config.table_uri, 2)
    kept = deletes_uri(config.table_uri)
    for batch in range(4):
        write_deltalake(kept, pa.table({"id": [batch], "updated_at": [dt.datetime(2024, 5, 1, batch)],
                                        "ingest_batch_id": [batch + 1]}), mode="append")
    rows = DeltaTable(kept).to_pyarrow_table().sort_by("id")
    report = PipelineRun(config, None, str(tmp_path / "_tidemark" / "offsets"), None).maintain()
    assert report["history_deletes"]["table"] == kept
    assert (report["history_deletes"]["optimize"]["files_before"], report["history_deletes"]["optimize"][
        "files_after"]) == (4, 1)
    assert report["history_deletes"]["checkpoint_version"] == DeltaTable(kept).version()
    assert DeltaTable(kept).to_pyarrow_table().sort_by("id") == rows
    assert "history_deletes" not in PipelineRun(parse_pipeline(pipeline(optimize_every="24h"), "t"), None,
                                                str(tmp_path / "_tidemark" / "offsets"), None).maintain()


def test_a_vacuum_of_the_ledger_frees_what_its_commits_left_and_changes_nothing_tidemark_reads(tmp_path):
    """Issue 42: each batch's commit flip rewrites its planned rows' file (and each compaction the pipeline's
    files); the ledger's VACUUM (by maintain, with vacuum_retain) deletes those once no version within the
    retention needs them. Its rows, the position and the next batch's compare-and-commit are as before."""
    from tidemark.kafka.offsets import OffsetRange, TopicPartition
    from tidemark.ledger.store import Ledger, planned_rows

    uri = str(tmp_path / "_tidemark" / "offsets")
    ledger = Ledger(uri)

    def batch(batch_id: int) -> None:
        ranges = [OffsetRange("orders", p, (batch_id - 1) * 10, batch_id * 10) for p in range(2)]
        ledger.append(planned_rows("orders", batch_id, ranges, f"run-{batch_id}"),
                      expected=ledger.state("orders").fingerprint)
        assert ledger.mark_committed("orders", batch_id, {r.tp: (10, 0) for r in ranges})

    for batch_id in range(1, 4):
        batch(batch_id)
    before, rows = ledger.state("orders"), sorted(ledger.rows("orders"), key=lambda r: (r.batch_id, r.partition))
    on_disk = len([p for p in (tmp_path / "_tidemark" / "offsets").rglob("*.parquet")])
    assert table_maintenance.vacuum(uri, None, "orders", dt.timedelta(days=7)) == []  # nothing that old yet
    deleted = table_maintenance.vacuum(uri, None, "orders", dt.timedelta(0), floor=dt.timedelta(0))
    assert len(deleted) >= 3  # at least each batch's planned rows' file, rewritten by its commit flip
    assert len([p for p in (tmp_path / "_tidemark" / "offsets").rglob("*.parquet")]) == on_disk - len(deleted)
    after = ledger.state("orders")
    assert (after.positions, after.last_batch_id, after.fingerprint) == (before.positions, before.last_batch_id,
                                                                         before.fingerprint)
    assert sorted(ledger.rows("orders"), key=lambda r: (r.batch_id, r.partition)) == rows
    batch(4)
    assert ledger.state("orders").positions == {TopicPartition("orders", p): 40 for p in range(2)}


def test_an_optimize_that_loses_to_a_schema_change_is_run_again_on_the_new_version(tmp_path, monkeypatch):
    """An OPTIMIZE planned before a batch that added a column (mergeSchema) cannot commit after it (delta-rs:
    'Metadata changed'); ``optimize`` runs it again on the new version instead of failing."""
    from tidemark import storage

    uri = str(tmp_path / "orders")
    small_batches(uri, 3)
    stale = DeltaTable(uri)  # the first attempt's snapshot, taken before the batch below commits
    write_deltalake(uri, pa.table({"kafka_partition": pa.array([0], pa.int32()), "kafka_offset": pa.array([99]),
                                   "ingest_batch_id": pa.array([4]), "customer": pa.array(["new field"])}),
                    mode="append", schema_mode="merge")
    opened = iter([stale])
    monkeypatch.setattr(storage, "open_table", lambda u, store=None: next(opened, None) or DeltaTable(u))
    done = table_maintenance.optimize(uri, None, "orders")
    assert (done["attempts"], done["files_before"], done["files_after"]) == (2, 4, 1)
    table = DeltaTable(uri)
    assert table.count() == 16 and "customer" in table.schema().to_arrow().names


def test_an_optimize_that_keeps_losing_fails_as_transient_having_changed_nothing(tmp_path, monkeypatch):
    from tidemark import storage
    from tidemark.errors import StorageUnavailableError

    uri = str(tmp_path / "orders")
    small_batches(uri, 3)
    old = DeltaTable(uri).version()
    write_deltalake(uri, pa.table({"kafka_partition": pa.array([0], pa.int32()), "customer": pa.array(["x"])}),
                    mode="append", schema_mode="merge")
    monkeypatch.setattr(storage, "open_table", lambda u, store=None: DeltaTable(u, version=old))  # always stale
    with pytest.raises(StorageUnavailableError, match="lost to concurrent commits 5 times; nothing was changed") as e:
        table_maintenance.optimize(uri, None, "orders")
    assert e.value.transient and e.value.pipeline == "orders"
    assert DeltaTable(uri).version() == old + 1 and len(DeltaTable(uri).file_uris()) == 4
