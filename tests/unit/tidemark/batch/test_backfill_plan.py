"""A backfill's ranges from a time window (tidemark.batch.backfill.window_ranges): Kafka's offsets_for_times
answers at the window's start and end, where a partition without a record at or after a bound answers None."""

from __future__ import annotations

import pytest

from tidemark.batch.backfill import window_ranges
from tidemark.errors import ConfigError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)
LATEST = {A0: 50, A1: 40, B0: 30}


def test_the_window_is_read_from_the_offset_at_its_start_to_the_offset_at_its_end_in_partition_order():
    ranges = window_ranges("p", [B0, A1, A0], {A0: 3, A1: 7, B0: 0}, {A0: 8, A1: 9, B0: 30}, LATEST)
    assert ranges == [OffsetRange("a", 0, 3, 8), OffsetRange("a", 1, 7, 9), OffsetRange("b", 0, 0, 30)]


def test_no_record_after_the_end_reads_up_to_the_latest_offset():
    assert window_ranges("p", [A0, A1], {A0: 3, A1: 7}, {A0: None}, LATEST) == [
        OffsetRange("a", 0, 3, 50), OffsetRange("a", 1, 7, 40)]  # None and an absent answer alike


def test_no_record_after_the_start_is_an_empty_window_that_is_skipped_by_default():
    ranges = window_ranges("p", [A0, A1, B0], {A0: None, A1: 7, B0: 12}, {A0: None, A1: 7, B0: 20}, LATEST)
    assert ranges == [OffsetRange("b", 0, 12, 20)]  # a:0 has nothing from the start on, a:1 nothing inside
    assert window_ranges("p", [A0], {A0: None}, {A0: None}, LATEST, on_empty_window="skip") == []


@pytest.mark.parametrize(("start", "end"), [(None, None), (7, 7), (9, None)])
def test_an_empty_window_fails_when_asked_naming_the_pipeline_and_the_partition(start, end):
    latest = {A0: 50, A1: 9}
    with pytest.raises(ConfigError, match=r"pipeline 'orders': a:1 has no records in the backfill window; "
                                          r"nothing was written \(on_empty_window: fail\)"):
        window_ranges("orders", [A0, A1], {A0: 3, A1: start}, {A0: 8, A1: end}, latest, on_empty_window="fail")
    assert window_ranges("orders", [A0, A1], {A0: 3, A1: 8}, {A0: 8, A1: 9}, latest, "fail") == [
        OffsetRange("a", 0, 3, 8), OffsetRange("a", 1, 8, 9)]
