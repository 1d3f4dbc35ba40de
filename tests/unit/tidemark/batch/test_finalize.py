"""The read check (tidemark.batch.read_checks.check_read): offset gaps from transaction markers, aborted records
and compaction pass; records outside the frozen ranges fail."""

from __future__ import annotations

import pytest

from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import check_read
from tidemark.batch.tables import Tally
from tidemark.errors import ReconciliationError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP

A0, B0 = TP("a", 0), TP("b", 0)


# --- offset gaps: transaction markers, aborted records, compaction --------------------------------

def plan_of(*ranges):
    return BatchPlan("p", 7, "t", "l", list(ranges))


@pytest.mark.parametrize(("frozen", "tally"), [
    ((3, 4), None),                # only a marker (or only aborted records): Spark returns no rows at all
    ((6, 9), Tally(2, 0, 7, 8)),   # marker first (6), then data
    ((0, 4), Tally(3, 0, 0, 2)),   # data, then a marker last (3)
    ((0, 10), Tally(2, 0, 0, 9)),  # a gap in the middle: 1..8 are markers, aborted or compacted away
])
def test_offset_gaps_pass_the_read_check(frozen, tally):
    check_read(plan_of(OffsetRange("a", 0, *frozen)), {} if tally is None else {A0: tally})


def test_records_outside_the_frozen_range_or_more_than_offsets_fail_the_read_check():
    with pytest.raises(ReconciliationError, match=r"a:0: Spark returned 2 records with offsets 5..10 for the frozen"):
        check_read(plan_of(OffsetRange("a", 0, 5, 10)), {A0: Tally(2, 0, 5, 10)})
    with pytest.raises(ReconciliationError, match="returned 4 records"):
        check_read(plan_of(OffsetRange("a", 0, 0, 3)), {A0: Tally(4, 0, 0, 2)})
    with pytest.raises(ReconciliationError, match="which batch 7 does not read"):
        check_read(plan_of(OffsetRange("a", 0, 0, 3)), {B0: Tally(1, 0, 0, 0)})
    # A pass that counted per partition of the plan and all records: the difference came from elsewhere
    check_read(plan_of(OffsetRange("a", 0, 0, 3)), {A0: Tally(2, 0, 0, 1)}, records=2)
    with pytest.raises(ReconciliationError, match=r"Spark returned 1 record\(s\) of partitions batch 7 does not read"):
        check_read(plan_of(OffsetRange("a", 0, 0, 3)), {A0: Tally(2, 0, 0, 1)}, records=3)
