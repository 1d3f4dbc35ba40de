"""The typed part of `tidemark audit --verify-sample` that needs no JVM (tidemark.audit.typed_sample): which pipelines
need it, how sampled ranges become Kafka reads, which columns are compared, each batch's format, and how Spark's
answer becomes the report. The comparison itself: tests/integration/test_audit.py."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidemark.audit.typed_sample import ValueCheck, batch_formats, build_check, describe, mismatches, needs_values
from tidemark.batch.schemas import BatchSchemas
from tidemark.config.pipeline import parse_pipeline
from tidemark.formats.frozen_schemas import FrozenSchemas
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import parse_field_type
from tidemark.ledger.store import COMMITTED, LedgerRow

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "long"}]}


def pipeline(**extra):
    return parse_pipeline({"name": "p", "topics": ["t"], "table": "out", **extra}, "test")


def committed(batch, partition, start, end, kind="batch", frozen=None):
    return LedgerRow("p", batch, kind, COMMITTED, "t", partition, start, end, end - start, 0, frozen_schemas=frozen)


def check(ranges, formats=None) -> ValueCheck:
    fmt = RecordFormat("json", (parse_field_type("order_id", "bigint"),)).to_dict()
    return ValueCheck("p", "/lake/out", "/lake/dead", ranges, formats or {str(r["batch_id"]): fmt for r in ranges})


def test_only_typed_outputs_need_the_decoder():
    assert not needs_values(pipeline())
    assert needs_values(pipeline(value_format="json", value_schema={"a": "bigint"}))
    assert needs_values(pipeline(value_format="avro"))
    assert needs_values(pipeline(key_format="avro"))  # raw values, but a decoded `key` column


def test_ranges_become_one_read_per_batch_with_each_partition_once():
    ranges = [{"topic": "t", "partition": 0, "start": 0, "end": 5, "batch_id": 1},
              {"topic": "t", "partition": 1, "start": 0, "end": 5, "batch_id": 1},
              {"topic": "t", "partition": 0, "start": 5, "end": 9, "batch_id": 2},
              {"topic": "t", "partition": 0, "start": 2, "end": 4, "batch_id": 1}]  # overlapping: a read of its own
    sampled = check(ranges)
    assert sampled.reads() == [[0, 1], [2], [3]]
    plan = sampled.read_plan([0, 1])
    assert (plan.batch_id, [(r.partition, r.start, r.end) for r in plan.ranges]) == (1, [(0, 0, 5), (1, 0, 5)])
    assert ValueCheck.from_json(sampled.to_json()) == sampled


def test_compared_columns_are_the_metadata_then_the_tables_payload_and_any_field_it_lacks():
    sampled = check([{"topic": "t", "partition": 0, "start": 0, "end": 5, "batch_id": 1}])
    table = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "kafka_headers",
             "note", "ingest_batch_id", "ingested_at", "kafka_date"]
    assert sampled.compared_columns(table) == ["kafka_timestamp", "kafka_key", "kafka_headers", "note", "order_id"]


def test_each_batch_decodes_with_its_frozen_schemas_and_a_batch_without_them_is_not_comparable(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    v1 = BatchSchemas(FrozenSchemas("t-value", 1, 1, json.dumps(ORDER), {"1": json.dumps(ORDER)})).to_json()
    # The table already has a column batch 1's schema lacks (added by a later batch): compared, not refused.
    write_deltalake(str(tmp_path / "out"), pa.table({"kafka_offset": pa.array([0], pa.int64()),
                                                    "order_id": pa.array([1], pa.int64()), "region": ["eu"]}))
    config = pipeline(value_format="avro")
    formats, refused = batch_formats(config, [committed(1, 0, 0, 5, frozen=v1), committed(2, 0, 5, 9)], None)
    assert [f.name for f in formats[1].fields] == ["order_id"] and formats[1].avro.reader_id == 1
    assert list(refused) == [2] and "needs the schemas frozen with the batch" in refused[2]


def test_the_check_carries_the_reprocessed_offsets_of_the_sampled_partitions():
    fmt = RecordFormat("json", (parse_field_type("order_id", "bigint"),))
    rows = [committed(1, 0, 0, 5), committed(1, 1, 0, 5), committed(3, 0, 1, 3, kind="reprocess"),
            committed(3, 1, 2, 3, kind="reprocess")]
    built = build_check(pipeline(value_format="json", value_schema={"order_id": "bigint"}), rows[:1], rows, {1: fmt})
    assert built.ranges == [{"topic": "t", "partition": 0, "start": 0, "end": 5, "batch_id": 1}]
    assert built.reprocessed == [{"topic": "t", "partition": 0, "start": 1, "end": 3}]
    assert built.format_of(1) == fmt


@pytest.mark.parametrize(("kafka", "table", "copies", "reason"), [
    ("output", None, 0, "not in the tables (decoded, it belongs in the output)"),
    (None, "output", 1, "in the output but not in Kafka"),
    ("output", "output", 2, "held 2 times in the tables (decoded, it belongs in the output once)"),
    ("dead letters", "output", 1, "in the output, but decoded it belongs in the dead letters"),
    ("output", "output", 1, "values differ: amount"),
])
def test_each_kind_of_difference_is_said_in_words(kafka, table, copies, reason):
    assert describe(7, kafka, table, ["amount"], False, copies)["reason"] == reason


def test_only_ranges_that_differ_are_reported():
    ranges = [{"topic": "t", "partition": p, "start": 0, "end": 3, "batch_id": 1} for p in range(3)]
    same = {"kafka_records": 3, "table_records": 3, "differing": 0, "values_differ": 0, "differences": []}
    fewer = {**same, "table_records": 2, "differing": 1, "differences": [describe(2, "output", None, [], False, 0)]}
    changed = {**same, "differing": 1, "values_differ": 1,
               "differences": [describe(1, "output", "output", ["a"], False)]}
    found = mismatches(check(ranges), [same, fewer, changed])
    assert [(m["partition"], m["checksums_differ"], m["values_differ"], m["differing_records"]) for m in found] == [
        (1, True, False, 1), (2, True, True, 1)]
