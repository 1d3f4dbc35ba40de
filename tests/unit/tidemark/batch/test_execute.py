"""The batch's Spark step (tidemark.batch.execute): which offsets the dead letters are read again from."""

from __future__ import annotations

from tidemark.batch.plan import BatchPlan
from tidemark.batch.tables import Tally
from tidemark.offsets import OffsetRange
from tidemark.offsets import TopicPartition as TP


def test_dead_letters_are_read_again_only_from_the_first_to_the_last_bad_record_of_each_partition():
    from tidemark.batch.execute import bad_spans

    ranges = [OffsetRange("t", 0, 100, 200), OffsetRange("t", 1, 0, 50), OffsetRange("t", 2, 10, 20)]
    plan = BatchPlan("p", 3, "/out", "/ledger", ranges)
    tallies = {TP("t", 0): Tally(100, 3, 100, 199, 140, 152),  # a burst
               TP("t", 1): Tally(50, 0, 0, 49),  # no bad record: not read again
               TP("t", 2): Tally(10, 2, 10, 19)}  # no span known (an older tally): its whole range
    assert bad_spans(plan, tallies) == [OffsetRange("t", 0, 140, 153), OffsetRange("t", 2, 10, 20)]
