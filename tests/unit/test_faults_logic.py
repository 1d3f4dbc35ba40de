"""Pure logic of the Kafka fault cases: retention gaps, recreated topics (topic ids), offset gaps
from transaction markers and compaction, and ledgers written before the topic_id column."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tidemark.batch.finalize import Tally, check_read
from tidemark.batch.plan import BatchPlan
from tidemark.errors import (
    DataLossError,
    OffsetsWentBackwardsError,
    ReconciliationError,
    TidemarkError,
    TopicRecreatedError,
)
from tidemark.ledger import COMMITTED, PLANNED, SCHEMA, Ledger, LedgerRow, derive_state, gap_rows, planned_rows
from tidemark.offsets import OffsetRange
from tidemark.offsets import TopicPartition as TP
from tidemark.planner import check_topic_ids, plan_ranges

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


def row(batch, kind, status, tp, start, end, topic_id=None):
    return LedgerRow("p", batch, kind, status, tp.topic, tp.partition, start, end, topic_id=topic_id)


# --- retention gaps -------------------------------------------------------------------------------

def test_data_loss_names_every_lost_range_and_both_ways_forward():
    with pytest.raises(DataLossError) as err:
        plan_ranges("orders", {A0: 3, A1: 5, B0: 2}, {A0: 8, A1: 5, B0: 4}, {A0: 20, A1: 9, B0: 4})
    message = str(err.value)
    assert isinstance(err.value, TidemarkError)
    assert message.startswith("pipeline 'orders': offsets a:0 [3, 8), b:0 [2, 4) were deleted by retention")
    assert "(7 offsets lost)" in message and "a:1" not in message
    assert "tidemark offsets reset orders --topic a:0 --topic b:0 --to-earliest --execute --reason" in message
    assert "on_data_loss: skip" in message and "'gap' row" in message


def test_gap_rows_are_committed_position_entries_that_hold_no_records():
    rows = gap_rows("p", 4, [OffsetRange("a", 0, 3, 8)], "run-1", {"a": "id-a"})
    assert [(r.batch_id, r.kind, r.status, r.start_offset, r.end_offset, r.record_count, r.topic_id) for r in rows] == [
        (4, "gap", COMMITTED, 3, 8, 0, "id-a")]
    assert "deleted by retention" in rows[0].reason and rows[0].committed_at is not None


def test_a_gap_entry_moves_the_position_and_the_batch_after_it_is_pending():
    rows = [row(1, "batch", COMMITTED, A0, 0, 3), *gap_rows("p", 2, [OffsetRange("a", 0, 3, 8)], "r"),
            *planned_rows("p", 3, [OffsetRange("a", 0, 8, 20)], "r")]
    state = derive_state(rows)
    assert state.positions == {A0: 8} and state.last_batch == {A0: 2}
    assert (state.pending_batch_id, state.pending_ranges) == (3, [OffsetRange("a", 0, 8, 20)])
    assert state.high_water == {A0: 3}  # a gap wrote nothing: no deduplication is needed after it
    committed = [r if r.batch_id != 3 else row(3, "batch", COMMITTED, A0, 8, 20) for r in rows]
    assert derive_state(committed).positions == {A0: 20}


# --- recreated topics -----------------------------------------------------------------------------

def test_a_changed_topic_id_is_refused_naming_the_offsets_and_the_reset():
    with pytest.raises(TopicRecreatedError) as err:
        check_topic_ids("orders", {"a": "old-id", "b": "b-id"}, {"a": "new-id", "b": "b-id"}, {A0: 5, A1: 7, B0: 1},
                        {A0: 9, A1: 12})
    message = str(err.value)
    assert isinstance(err.value, OffsetsWentBackwardsError)
    assert "pipeline 'orders': topic 'a' was deleted and recreated" in message
    assert "now new-id" in message and "belong to topic id old-id" in message
    assert "committed: a:0@5, a:1@7" in message and "latest offsets now: a:0@9, a:1@12" in message
    assert "nothing was read or written" in message
    assert "tidemark offsets reset orders --topic a --to-earliest --execute --reason" in message


def test_unknown_or_unchanged_topic_ids_are_not_refused():
    check_topic_ids("p", {}, {"a": "x"}, {A0: 5})            # a ledger without topic ids (older rows)
    check_topic_ids("p", {"a": "x"}, {}, {A0: 5})            # a broker that gives no topic ids
    check_topic_ids("p", {"a": "x"}, {"a": "x", "b": "y"}, {A0: 5})


def test_a_pending_batch_of_a_recreated_topic_says_it_cannot_be_executed():
    with pytest.raises(TopicRecreatedError, match="Batch 4 was frozen against the old topic and cannot be executed"):
        check_topic_ids("p", {"a": "old"}, {"a": "new"}, {A0: 5}, pending_batch=4)


def test_a_reset_onto_a_recreated_topic_starts_a_new_incarnation():
    rows = [row(1, "batch", COMMITTED, A0, 0, 50, "old"), row(1, "batch", COMMITTED, A1, 0, 40, "old"),
            row(1, "batch", COMMITTED, B0, 0, 9, "b"),
            row(2, "reset", COMMITTED, A0, 50, 0, "new")]
    state = derive_state(rows)
    assert state.topic_ids == {"a": "new", "b": "b"}
    # a:1 belongs to the old topic: it starts like a new partition; b is untouched
    assert state.positions == {A0: 0, B0: 9}
    assert state.high_water == {B0: 9}  # offsets of the new topic are not deduplicated against the old one
    assert derive_state(rows[:3]).topic_ids == {"a": "old", "b": "b"}


def test_rows_without_a_topic_id_keep_the_position():
    rows = [row(1, "batch", COMMITTED, A0, 0, 5), row(2, "batch", COMMITTED, A0, 5, 9, "id")]
    state = derive_state(rows)
    assert state.positions == {A0: 9} and state.topic_ids == {"a": "id"} and state.high_water == {A0: 9}


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


# --- a ledger created before the topic_id column ---------------------------------------------------

def test_a_ledger_without_the_topic_id_column_is_read_and_gains_it_on_append(tmp_path):
    from deltalake import write_deltalake

    uri = str(tmp_path / "offsets")
    old_schema = pa.schema([f for f in SCHEMA if f.name != "topic_id"])
    old = {f.name: [None] for f in old_schema}
    old.update(pipeline=["p"], batch_id=[1], kind=["batch"], status=[COMMITTED], topic=["a"], partition=[0],
               start_offset=[0], end_offset=[5], record_count=[5], dead_letter_count=[0])
    write_deltalake(uri, pa.Table.from_pydict(old, schema=old_schema), partition_by=["pipeline"])

    ledger = Ledger(uri)
    state = ledger.state("p")
    assert state.positions == {A0: 5} and state.topic_ids == {}
    [legacy] = ledger.rows("p")
    assert legacy.topic_id is None

    ledger.append(planned_rows("p", 2, [OffsetRange("a", 0, 5, 9)], "run", topic_ids={"a": "id-a"}),
                  expected=state.fingerprint)
    assert ledger.mark_committed("p", 2, {A0: (4, 0)})
    rows = sorted(ledger.rows("p"), key=lambda r: r.batch_id)
    assert [(r.batch_id, r.status, r.end_offset, r.topic_id) for r in rows] == [
        (1, COMMITTED, 5, None), (2, COMMITTED, 9, "id-a")]
    assert ledger.state("p").positions == {A0: 9}
    assert PLANNED not in {r.status for r in rows}


def test_dead_letters_are_read_again_only_from_the_first_to_the_last_bad_record_of_each_partition():
    from tidemark.batch.execute import bad_spans

    ranges = [OffsetRange("t", 0, 100, 200), OffsetRange("t", 1, 0, 50), OffsetRange("t", 2, 10, 20)]
    plan = BatchPlan("p", 3, "/out", "/ledger", ranges)
    tallies = {TP("t", 0): Tally(100, 3, 100, 199, 140, 152),  # a burst
               TP("t", 1): Tally(50, 0, 0, 49),  # no bad record: not read again
               TP("t", 2): Tally(10, 2, 10, 19)}  # no span known (an older tally): its whole range
    assert bad_spans(plan, tallies) == [OffsetRange("t", 0, 140, 153), OffsetRange("t", 2, 10, 20)]
