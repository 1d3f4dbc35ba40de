"""The keyed sample's Spark side that needs no JVM (tidemark_spark.audit_keys): the columns a key's changes are
ordered by, and the picked keys' joined rows gathered per key. The job itself: tests/integration/test_keyed_audit.py."""

from __future__ import annotations

import pytest

from tidemark.batch.spark.merge import ordering_columns
from tidemark.config.keyed_tables import CDC_COLUMNS
from tidemark.formats.record_format import KeyedSpec
from tidemark_spark.audit_keys import sampled

pytestmark = pytest.mark.unit


def test_changes_are_ordered_as_the_merge_orders_them():
    assert ordering_columns(KeyedSpec(("id",))) == ["kafka_offset"]
    assert ordering_columns(KeyedSpec(("id",), order_by=("updated_at", "seq"))) == ["updated_at", "seq"]
    assert ordering_columns(KeyedSpec(("id",), envelope="debezium", columns=CDC_COLUMNS)) == ["cdc_position",
                                                                                              "cdc_ts_ms"]


def test_the_joined_rows_are_gathered_per_key_with_every_row_the_table_holds():
    def joined(key, region, offset, op, held):
        return {"id": key, "region": region, "kafka_topic": "t", "kafka_partition": 0, "kafka_offset": offset,
                "__tidemark_op": op, "_cols": [1, 2], "_held": held}

    found = [joined(1, "eu", 4, "u", [1, 2]), joined(1, "eu", 4, "u", [1, 3]), joined(2, "eu", 5, "d", None),
             joined(3, None, 6, "u", None)]
    assert sampled(found, ["id", "region"]) == [
        {"key": {"id": 1, "region": "eu"}, "topic": "t", "partition": 0, "offset": 4, "op": "u", "kafka": [1, 2],
         "table": [[1, 2], [1, 3]]},
        {"key": {"id": 2, "region": "eu"}, "topic": "t", "partition": 0, "offset": 5, "op": "d", "kafka": [1, 2],
         "table": []},
        {"key": {"id": 3, "region": None}, "topic": "t", "partition": 0, "offset": 6, "op": "u", "kafka": [1, 2],
         "table": []}]
