"""The batch's Spark step (tidemark.batch.execute): which offsets the dead letters are read again from."""

from __future__ import annotations

from tidemark.batch.plan import BatchPlan
from tidemark.batch.spark.tally import BAD_PAGE_BITS
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP

PAGE = 1 << BAD_PAGE_BITS


def test_dead_letters_are_read_again_only_from_the_pages_that_hold_the_bad_records_of_each_partition():
    from tidemark.batch.modes.checked_append import bad_spans

    ranges = [OffsetRange("t", 0, 100, 5 * PAGE), OffsetRange("t", 1, 0, 50), OffsetRange("t", 2, 10, 20),
              OffsetRange("u", 0, PAGE + 7, 3 * PAGE)]
    plan = BatchPlan("p", 3, "/out", "/ledger", ranges)
    spans = {TP("t", 0): (2 * PAGE, 4 * PAGE),  # a burst over two pages
             TP("t", 2): (0, PAGE),  # the page is wider than the range: its range only
             TP("u", 0): (PAGE, 2 * PAGE),  # the same partition number in another topic
             TP("v", 0): (0, PAGE)}  # not in the plan: nothing read (finalize_batch refuses the batch)
    assert bad_spans(plan, spans) == [OffsetRange("t", 0, 2 * PAGE, 4 * PAGE), OffsetRange("t", 2, 10, 20),
                                      OffsetRange("u", 0, PAGE + 7, 2 * PAGE)]  # t:1 had none: not read
