"""History tables' pipeline files and tables (``keyed.history: scd2``), without Spark: the output columns, the
tombstone rule's place in the plan, and the refusal, at plan time (``tidemark.batch.schemas.batch_format``, delta-rs),
of a history pipeline over a keyed table without history and of a keyed pipeline over a history table. The broken
files are in tests/unit/tidemark/test_config.py's fixtures (history_*.yaml)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidemark.batch.schemas import batch_format
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import SchemaChangeError
from tidemark.formats.record_format import RecordFormat, output_columns


def pipeline(history: str | None = "scd2", **keyed):
    block = {"keys": ["id"], "order_by": ["updated_at"], "delete_field": "op", "delete_values": ["delete"], **keyed}
    if history:
        block["history"] = history
    return parse_pipeline({"name": "customers", "topics": ["customers"], "table": "customers",
                           "value_format": "json", "value_schema": {"id": "bigint", "name": "string?",
                                                                    "updated_at": "timestamp", "op": "string?"},
                           "keyed": block}, "test")


def table(uri: str, history: bool) -> None:
    columns = {"kafka_topic": ["customers"], "kafka_partition": [0], "kafka_offset": [0], "id": [1],
               "name": ["a"], "updated_at": [dt.datetime(2024, 5, 1, tzinfo=dt.UTC)], "op": [None],
               "ingest_batch_id": [1]}
    if history:
        columns |= {"valid_from": [dt.datetime(2024, 5, 1, tzinfo=dt.UTC)],
                    "valid_to": pa.array([None], pa.timestamp("us", "UTC")), "is_current": [True]}
    write_deltalake(uri, pa.table({k: pa.array(v, type=pa.string()) if k == "op" else v
                                   for k, v in columns.items()}))


def test_a_history_table_has_the_keyed_columns_and_its_interval(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    fmt = pipeline().record_format
    assert output_columns(fmt)[-5:] == ["valid_from", "valid_to", "is_current", "ingest_batch_id", "ingested_at"]
    assert fmt.keyed.keeps_history and not pipeline(None).record_format.keyed.keeps_history
    assert RecordFormat.from_dict(fmt.to_dict()) == fmt  # the frozen plan keeps it
    debezium = parse_pipeline({"name": "c", "topics": ["c"], "table": "c", "value_format": "json",
                               "value_schema": {"id": "bigint"},
                               "keyed": {"keys": ["id"], "envelope": "debezium", "history": "scd2"}}, "test")
    assert output_columns(debezium.record_format)[-8:-2] == ["cdc_op", "cdc_position", "cdc_ts_ms", "valid_from",
                                                             "valid_to", "is_current"]


def test_the_history_columns_of_the_table_are_no_schema_change(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = pipeline()
    table(config.table_uri, history=True)
    fmt = batch_format(config, None)
    assert not fmt.add_columns and not fmt.casts and not fmt.widen


def test_history_over_a_keyed_table_without_history_is_refused_saying_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = pipeline()
    table(config.table_uri, history=False)
    with pytest.raises(SchemaChangeError, match=r"pipeline 'customers': keyed.history: scd2, but .*customers is a "
                                                r"keyed table without history .* Write the history to a new table"):
        batch_format(config, None)


def test_a_keyed_pipeline_over_a_history_table_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = pipeline(None)
    table(config.table_uri, history=True)
    with pytest.raises(SchemaChangeError, match=r"is a history table \(valid_from, valid_to, is_current\), and the "
                                                r"pipeline has no keyed.history: its MERGE would change every "
                                                r"version of a key. Put 'history: scd2' back"):
        batch_format(config, None)


def test_a_keyed_table_whose_values_carry_such_fields_stays_a_keyed_table(monkeypatch, tmp_path):
    """A keyed pipeline whose values have fields named valid_from, valid_to and is_current (a source table that is
    itself a history) is no history table: its plan is not refused."""
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = parse_pipeline({"name": "customers", "topics": ["customers"], "table": "customers",
                             "value_format": "json",
                             "value_schema": {"id": "bigint", "name": "string?", "updated_at": "timestamp",
                                              "op": "string?", "valid_from": "timestamp", "valid_to": "timestamp?",
                                              "is_current": "boolean"},
                             "keyed": {"keys": ["id"]}}, "test")
    table(config.table_uri, history=True)
    assert not batch_format(config, None).add_columns


def test_a_history_table_refuses_to_widen_its_ordering(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    config = parse_pipeline({"name": "customers", "topics": ["customers"], "table": "customers",
                             "value_format": "json", "value_schema": {"id": "bigint", "seq": "bigint"},
                             "keyed": {"keys": ["id"], "order_by": ["seq"], "history": "scd2"}}, "test")
    write_deltalake(config.table_uri, pa.table({"id": pa.array([1], pa.int64()), "seq": pa.array([1], pa.int32()),
                                                "valid_from": pa.array([1], pa.int32()),
                                                "valid_to": pa.array([None], pa.int32()), "is_current": [True]}))
    with pytest.raises(SchemaChangeError, match=r"the value's 'seq' changed type \(bigint\), and in the history "
                                                r"table .* it is a key or the ordering"):
        batch_format(config, None)
