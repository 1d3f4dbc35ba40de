"""Dead letters from the bad records the one pass carried (tidemark.batch.carried), written with delta-rs into a
local table: the rows, the batch's marker, and a second write of the same batch that writes nothing."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tidemark.batch import carried
from tidemark.batch.plan import BatchPlan
from tidemark.kafka.offsets import OffsetRange

STAMP = dt.datetime(2026, 11, 28, 7, 1, 2, 345678, tzinfo=dt.UTC)


def micros(when: dt.datetime) -> int:
    return (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def record(offset: int) -> dict:
    return {"kafka_topic": "orders", "kafka_partition": 1, "kafka_offset": offset, "kafka_timestamp": micros(STAMP),
            "kafka_key": b"k", "kafka_headers": [{"key": "source", "value": b"web"}], "value": b"{not json",
            "error": "value is not a JSON object", "ingested_at": micros(STAMP) + 1}


def plan(tmp_path, batch_id: int) -> BatchPlan:
    return BatchPlan("orders_pipe", batch_id, str(tmp_path / "out"), str(tmp_path / "ledger"),
                     [OffsetRange("orders", 1, 0, 100)], dead_letter_uri=str(tmp_path / "dead"))


def test_carried_bad_records_become_one_marked_commit_of_dead_letters_once(tmp_path):
    assert carried.write(plan(tmp_path, 3), [record(7), record(9)]) is True
    assert carried.write(plan(tmp_path, 3), [record(7), record(9)]) is False  # the marker is there: nothing again

    table = DeltaTable(str(tmp_path / "dead"))
    assert table.version() == 0 and table.transaction_version("orders_pipe") == 3
    assert '"batch_id": 3' in table.history(1)[0]["userMetadata"]
    rows = table.to_pyarrow_table().sort_by("kafka_offset").to_pylist()
    assert [r["kafka_offset"] for r in rows] == [7, 9]
    assert rows[0] == {"pipeline": "orders_pipe", "kafka_topic": "orders", "kafka_partition": 1, "kafka_offset": 7,
                       "kafka_timestamp": STAMP, "kafka_key": b"k", "value": b"{not json",
                       "kafka_headers": [{"key": "source", "value": b"web"}], "error": "value is not a JSON object",
                       "ingest_batch_id": 3, "ingested_at": STAMP + dt.timedelta(microseconds=1)}


def test_carried_dead_letters_append_to_a_table_with_more_columns_leaving_them_null(tmp_path):
    extra = carried.arrow_schema().append(pa.field("note", pa.string()))
    write_deltalake(str(tmp_path / "dead"), pa.Table.from_pylist([], schema=extra))
    assert carried.write(plan(tmp_path, 4), [record(1)]) is True
    table = DeltaTable(str(tmp_path / "dead"))
    held = table.to_pyarrow_table().to_pylist()
    assert [(r["kafka_offset"], r["note"], r["ingest_batch_id"]) for r in held] == [(1, None, 4)]


def _without(name: str) -> pa.Schema:
    schema = carried.arrow_schema()
    return schema.remove(schema.get_field_index(name))


def _retyped(name: str, kind: pa.DataType) -> pa.Schema:
    schema = carried.arrow_schema()
    return schema.set(schema.get_field_index(name), pa.field(name, kind))


@pytest.mark.parametrize(("schema", "named"), [
    (_retyped("kafka_offset", pa.string()), "kafka_offset"),  # an offset kept as text
    (_without("kafka_headers"), "no column kafka_headers"),  # Arrow would drop the headers without a word
    (carried.arrow_schema().append(pa.field("tenant", pa.string(), nullable=False)), "column tenant takes no null"),
], ids=["a column of another type", "a column missing", "a required column of its own"])
def test_a_table_whose_columns_cannot_take_the_carried_records_is_refused_before_any_commit(tmp_path, schema, named):
    write_deltalake(str(tmp_path / "dead"), pa.Table.from_pylist([], schema=schema))
    with pytest.raises(carried.UnfitTableError, match=str(tmp_path / "dead")) as refused:
        carried.write(plan(tmp_path, 5), [record(1)])
    assert named in str(refused.value)
    table = DeltaTable(str(tmp_path / "dead"))
    assert table.version() == 0 and table.transaction_version("orders_pipe") is None


@pytest.mark.parametrize(("uri", "log_store", "beside"), [
    ("/lake/dead", None, True),
    ("s3://lake/dead", "io.tidemark.delta.S3ConditionalPutLogStore", True),
    ("s3a://lake/dead", "io.delta.storage.S3DynamoDBLogStore", False),  # its versions are claimed in DynamoDB
    ("s3://lake/dead", None, False),
])
def test_delta_rs_commits_beside_spark_only_where_both_take_a_version_the_same_way(uri, log_store, beside):
    assert carried.beside_spark(uri, log_store) is beside
