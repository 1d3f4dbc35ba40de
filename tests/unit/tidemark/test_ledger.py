"""The ledger (tidemark.ledger.store): state derived from its rows (positions, pending batch, gaps, topic
incarnations), a ledger written before the topic_id column, and a keyed batch's row changes."""

from __future__ import annotations

import pyarrow as pa

from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.state import RowChanges, batch_changes, changes_row, commit_source
from tidemark.ledger.store import COMMITTED, PLANNED, SCHEMA, Ledger, LedgerRow, derive_state, gap_rows, planned_rows


def row(batch, partition, start, end, status=COMMITTED, kind="batch"):
    return LedgerRow("p", batch, kind, status, "t", partition, start, end)


def test_position_is_the_end_of_the_latest_committed_row():
    state = derive_state([row(2, 0, 10, 15), row(1, 0, 0, 10), row(1, 1, 0, 4)])
    assert state.positions == {TP("t", 0): 15, TP("t", 1): 4}
    assert state.last_batch == {TP("t", 0): 2, TP("t", 1): 1}
    assert state.last_batch_id == 2 and state.pending_batch_id is None


def test_planned_rows_are_pending_and_do_not_move_the_position():
    state = derive_state([row(1, 0, 0, 10), row(2, 0, 10, 20, status=PLANNED)])
    assert state.positions == {TP("t", 0): 10}
    assert state.pending_batch_id == 2
    assert state.pending_ranges == [OffsetRange("t", 0, 10, 20)]
    assert state.last_batch_id == 2


def test_backfill_rows_do_not_move_the_position():
    state = derive_state([row(1, 0, 0, 10), row(2, 0, 0, 5, kind="backfill")])
    assert state.positions == {TP("t", 0): 10}


def test_empty_ledger():
    state = derive_state([])
    assert state.positions == {} and state.last_batch_id == 0 and state.pending_batch_id is None


def test_pending_owner_and_fingerprint():
    planned = LedgerRow("p", 2, "batch", PLANNED, "t", 0, 10, 20, dag_run_id="run-9")
    state = derive_state([row(1, 0, 0, 10), planned])
    assert state.pending_owner == "run-9"
    assert state.fingerprint == derive_state([planned, row(1, 0, 0, 10)]).fingerprint  # order-free
    committed = LedgerRow("p", 2, "batch", COMMITTED, "t", 0, 10, 20, dag_run_id="run-9")
    assert derive_state([row(1, 0, 0, 10), committed]).fingerprint != state.fingerprint


A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


def topic_row(batch, kind, status, tp, start, end, topic_id=None):
    return LedgerRow("p", batch, kind, status, tp.topic, tp.partition, start, end, topic_id=topic_id)


def test_gap_rows_are_committed_position_entries_that_hold_no_records():
    rows = gap_rows("p", 4, [OffsetRange("a", 0, 3, 8)], "run-1", {"a": "id-a"})
    assert [(r.batch_id, r.kind, r.status, r.start_offset, r.end_offset, r.record_count, r.topic_id) for r in rows] == [
        (4, "gap", COMMITTED, 3, 8, 0, "id-a")]
    assert "deleted by retention" in rows[0].reason and rows[0].committed_at is not None


def test_a_gap_entry_moves_the_position_and_the_batch_after_it_is_pending():
    rows = [topic_row(1, "batch", COMMITTED, A0, 0, 3), *gap_rows("p", 2, [OffsetRange("a", 0, 3, 8)], "r"),
            *planned_rows("p", 3, [OffsetRange("a", 0, 8, 20)], "r")]
    state = derive_state(rows)
    assert state.positions == {A0: 8} and state.last_batch == {A0: 2}
    assert (state.pending_batch_id, state.pending_ranges) == (3, [OffsetRange("a", 0, 8, 20)])
    assert state.high_water == {A0: 3}  # a gap wrote nothing: no deduplication is needed after it
    committed = [r if r.batch_id != 3 else topic_row(3, "batch", COMMITTED, A0, 8, 20) for r in rows]
    assert derive_state(committed).positions == {A0: 20}


def test_a_reset_onto_a_recreated_topic_starts_a_new_incarnation():
    rows = [topic_row(1, "batch", COMMITTED, A0, 0, 50, "old"), topic_row(1, "batch", COMMITTED, A1, 0, 40, "old"),
            topic_row(1, "batch", COMMITTED, B0, 0, 9, "b"),
            topic_row(2, "reset", COMMITTED, A0, 50, 0, "new")]
    state = derive_state(rows)
    assert state.topic_ids == {"a": "new", "b": "b"}
    # a:1 belongs to the old topic: it starts like a new partition; b is untouched
    assert state.positions == {A0: 0, B0: 9}
    assert state.high_water == {B0: 9}  # offsets of the new topic are not deduplicated against the old one
    assert derive_state(rows[:3]).topic_ids == {"a": "old", "b": "b"}


def test_rows_without_a_topic_id_keep_the_position():
    rows = [topic_row(1, "batch", COMMITTED, A0, 0, 5), topic_row(2, "batch", COMMITTED, A0, 5, 9, "id")]
    state = derive_state(rows)
    assert state.positions == {A0: 9} and state.topic_ids == {"a": "id"} and state.high_water == {A0: 9}


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


# --- what a keyed batch's MERGE did to the rows: one set per batch, on its first row --------------

def test_a_batchs_row_changes_ride_on_its_first_partition_and_are_counted_once():
    b1, a3 = TP("b", 1), TP("a", 3)
    assert changes_row([b1, a3, TP("b", 0)]) == a3 and changes_row([]) is None
    source = commit_source("p", 7, {b1: (5, 0), a3: (4, 1)}, RowChanges(inserted=2, updated=1, deleted=3))
    assert source.select(["topic", "partition", "rows_inserted", "rows_updated", "rows_deleted"]).to_pylist() == [
        {"topic": "b", "partition": 1, "rows_inserted": None, "rows_updated": None, "rows_deleted": None},
        {"topic": "a", "partition": 3, "rows_inserted": 2, "rows_updated": 1, "rows_deleted": 3}]
    plain = commit_source("p", 7, {b1: (5, 0)})  # an append: null everywhere
    assert plain.column("rows_inserted").null_count == 1 and plain.column("record_count").to_pylist() == [5]
    rows = [LedgerRow("p", 7, "batch", COMMITTED, tp.topic, tp.partition, 0, 5, rows_inserted=i, rows_updated=u,
                      rows_deleted=d) for tp, (i, u, d) in ((a3, (2, 1, 3)), (b1, (None, None, None)))]
    assert batch_changes(rows) == RowChanges(2, 1, 3)
    assert batch_changes([row(1, 0, 0, 5)]) is None  # an append's, a reset's, or one committed before version 4


def test_mark_committed_stores_a_keyed_batchs_changes_and_leaves_an_appends_null(tmp_path):
    ledger = Ledger(str(tmp_path / "offsets"))
    ranges = [OffsetRange("t", 1, 0, 5), OffsetRange("t", 0, 0, 7)]
    for batch_id, changes in ((1, RowChanges(6, 0, 0)), (2, None)):
        ledger.append(planned_rows("p", batch_id, ranges, "run"), expected=ledger.state("p").fingerprint)
        assert ledger.mark_committed("p", batch_id, {r.tp: (5, 0) for r in ranges}, changes)
    assert not ledger.mark_committed("p", 1, {r.tp: (5, 0) for r in ranges}, RowChanges(9, 9, 9))  # idempotent
    stored = {(r.batch_id, r.partition): (r.rows_inserted, r.rows_updated, r.rows_deleted) for r in ledger.rows("p")}
    assert stored == {(1, 0): (6, 0, 0), (1, 1): (None, None, None), (2, 0): (None, None, None),
                      (2, 1): (None, None, None)}


def test_batch_reads_the_rows_of_one_entry_of_one_pipeline(tmp_path):
    ledger = Ledger(str(tmp_path / "offsets"))
    assert ledger.batch("p", 1) == []  # no ledger yet
    ranges = [OffsetRange("t", 1, 0, 5), OffsetRange("t", 0, 0, 7)]
    for pipeline in ("p", "q"):
        for batch_id in (1, 2):
            ledger.append(planned_rows(pipeline, batch_id, ranges, "run"), expected=ledger.state(pipeline).fingerprint)
            ledger.mark_committed(pipeline, batch_id, {r.tp: (5, 0) for r in ranges})
    assert sorted((r.pipeline, r.batch_id, r.partition) for r in ledger.batch("p", 2)) == [("p", 2, 0), ("p", 2, 1)]
    assert sorted(ledger.batch("q", 1), key=lambda r: r.partition) == sorted(
        (r for r in ledger.rows("q") if r.batch_id == 1), key=lambda r: r.partition)
    assert ledger.batch("p", 3) == [] and ledger.batch("other", 1) == []


# --- the records a transform filtered out: per partition, on every row of the batch -----------------

def test_a_transformed_batchs_filtered_counts_ride_on_each_partition():
    b1, a3 = TP("b", 1), TP("a", 3)
    source = commit_source("p", 7, {b1: (5, 0), a3: (4, 1)}, filtered={a3: 2})
    assert source.select(["topic", "partition", "filtered_count"]).to_pylist() == [
        {"topic": "b", "partition": 1, "filtered_count": 0},  # missing from the mapping: none filtered
        {"topic": "a", "partition": 3, "filtered_count": 2}]
    assert commit_source("p", 7, {b1: (5, 0)}).column("filtered_count").to_pylist() == [None]  # no transform


def test_mark_committed_stores_the_filtered_counts_and_leaves_them_null_without_a_transform(tmp_path):
    ledger = Ledger(str(tmp_path / "offsets"))
    ranges = [OffsetRange("t", 1, 0, 5), OffsetRange("t", 0, 0, 7)]
    for batch_id, filtered in ((1, {TP("t", 0): 3}), (2, None)):
        ledger.append(planned_rows("p", batch_id, ranges, "run"), expected=ledger.state("p").fingerprint)
        assert ledger.mark_committed("p", batch_id, {r.tp: (5, 0) for r in ranges}, filtered=filtered)
    assert not ledger.mark_committed("p", 1, {r.tp: (5, 0) for r in ranges}, filtered={TP("t", 0): 9})
    stored = {(r.batch_id, r.partition): r.filtered_count for r in ledger.rows("p")}
    assert stored == {(1, 0): 3, (1, 1): 0, (2, 0): None, (2, 1): None}


def test_a_version_4_ledger_migrates_on_commit_and_its_older_rows_read_null(tmp_path):
    """tests/fixtures/ledger_v4, written by the last release at schema version 4: the first write adds
    filtered_count (version 5); the rows it had keep their values, null in the new column."""
    import shutil
    from pathlib import Path

    from deltalake import DeltaTable

    from tidemark.ledger import migrations as m

    uri = tmp_path / "ledger_v4"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "ledger_v4", uri)
    ledger = Ledger(str(uri))
    assert m.schema_version(DeltaTable(str(uri))) == 4
    keyed = sorted(ledger.rows("customers"), key=repr)
    assert ledger.mark_committed("orders", 3, {TP("orders", 0): (8, 0), TP("orders", 1): (2, 0)},
                                 filtered={TP("orders", 0): 5})
    table = DeltaTable(str(uri))
    assert m.schema_version(table) == m.CURRENT_VERSION == 6
    assert [f.name for f in table.schema().fields[-2:]] == ["filtered_count", "frozen_plan"]
    assert sorted(ledger.rows("customers"), key=repr) == keyed  # rows_* kept, filtered_count null
    assert {(r.batch_id, r.partition): r.filtered_count for r in ledger.rows("orders") if r.kind == "batch"} == {
        (1, 0): None, (1, 1): None, (3, 0): 5, (3, 1): 0}
