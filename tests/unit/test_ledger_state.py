from __future__ import annotations

from tidemark.ledger import COMMITTED, PLANNED, LedgerRow, derive_state
from tidemark.offsets import OffsetRange
from tidemark.offsets import TopicPartition as TP


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
