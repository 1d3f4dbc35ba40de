"""Checks made before a batch is frozen (tidemark.batch.prepare.check_locations), on local Delta tables
written by delta-rs (no service, no JVM)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidemark.batch.prepare import check_locations
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError


def test_a_partition_by_that_differs_from_the_existing_output_table_is_refused_before_planning(tmp_path, monkeypatch):
    """Delta cannot change a table's partitioning on append: the job used to fail inside Spark after the
    batch was frozen, and every retry failed the same way."""
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    write_deltalake(str(tmp_path / "orders"), pa.table({"kafka_partition": pa.array([0], pa.int32()),
                                                        "kafka_offset": pa.array([1], pa.int64())}))
    moved = parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders",
                            "partition_by": ["kafka_partition"]}, "orders.yaml")
    with pytest.raises(ConfigError, match=r"pipeline 'orders': partition_by is \[kafka_partition\] but the output "
                                          r"table .*orders is partitioned by \[\]: .*Set partition_by back to \[\]"):
        check_locations(moved, None)
    same = parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders"}, "orders.yaml")
    check_locations(same, None)
    check_locations(parse_pipeline({"name": "new", "topics": ["new"], "table": "new",
                                    "partition_by": ["kafka_partition"]}, "new.yaml"), None)  # no table yet
