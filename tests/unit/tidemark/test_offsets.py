from __future__ import annotations

import json

import pytest

from tidemark.kafka.offsets import OffsetRange, spark_kafka_options, spark_min_partitions


def test_spark_options_list_exactly_the_non_empty_ranges():
    options = spark_kafka_options([OffsetRange("b", 1, 5, 9), OffsetRange("a", 0, 0, 3), OffsetRange("a", 2, 4, 4)])
    assert json.loads(options["assign"]) == {"a": [0], "b": [1]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": 0}, "b": {"1": 5}}
    assert json.loads(options["endingOffsets"]) == {"a": {"0": 3}, "b": {"1": 9}}


def test_spark_options_refuse_an_empty_batch():
    with pytest.raises(ValueError):
        spark_kafka_options([OffsetRange("a", 0, 4, 4)])


def test_invalid_range_is_rejected():
    with pytest.raises(ValueError, match=r"a:0 \[5, 4\)"):
        OffsetRange("a", 0, 5, 4)


def test_only_ranges_over_the_task_size_are_split_and_the_split_covers_every_long_range():
    small = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 100)]
    assert spark_min_partitions(small, 100) is None  # one task per partition, Spark's default
    assert spark_min_partitions(small, None) is None  # plans frozen before the setting
    assert spark_min_partitions([OffsetRange("t", 0, 5, 5)], 1) is None  # empty ranges read nothing
    hot = [OffsetRange("t", 0, 0, 1_600_000)] + [OffsetRange("t", p, 0, 57_000) for p in range(1, 8)]
    split = spark_min_partitions(hot, 500_000)
    assert split == 4 + 7  # Spark splits only once minPartitions exceeds the number of ranges
    assert split > len(hot)
