"""Reserving and committing a reprocess of dead letters (tidemark.operations.reprocessing) on delta-rs tables on the
local disk: the selection, the planned entry that moves no position and holds no batch, refusals, a resumed entry,
and the commit's counts. The Spark job itself is tests/integration/test_reprocess_dead_letters.py."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError, PipelineBusyError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import COMMITTED, PLANNED, Ledger, LedgerRow, derive_state, fingerprint
from tidemark.operations import reprocessing


@pytest.fixture
def lake(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_LAKE_ROOT", str(tmp_path))
    monkeypatch.delenv("TIDEMARK_LEDGER_URI", raising=False)
    config = parse_pipeline({"name": "p", "topics": ["t"], "table": "out", "value_format": "json",
                             "value_schema": {"id": "bigint"}}, "test")
    ledger = Ledger(str(tmp_path / "_tidemark" / "offsets"))
    ledger.append([LedgerRow("p", 1, "batch", COMMITTED, "t", 0, 0, 10, 10, 3),
                   LedgerRow("p", 1, "batch", COMMITTED, "t", 1, 0, 10, 10, 1),
                   LedgerRow("p", 2, "batch", COMMITTED, "t", 0, 10, 20, 10, 1)], expected=fingerprint([]))
    return config, ledger


def write_dead(config, rows: list[tuple[str, int, int, int]]) -> None:
    """(pipeline, partition, offset, batch) dead letters."""
    write_deltalake(config.dead_letter_uri, pa.table({
        "pipeline": [r[0] for r in rows], "kafka_topic": ["t"] * len(rows),
        "kafka_partition": pa.array([r[1] for r in rows], pa.int32()),
        "kafka_offset": pa.array([r[2] for r in rows], pa.int64()), "value": [b"{}"] * len(rows),
        "error": ["bad"] * len(rows), "ingest_batch_id": pa.array([r[3] for r in rows], pa.int64())}), mode="append")


def reserve(config, ledger, batch_id=None, reason="fixed"):
    return reprocessing.reserve(config, ledger, None, batch_id=batch_id, reason=reason, owner="cli:me@here")


def test_a_reserved_entry_selects_per_partition_the_span_of_its_dead_letters_and_moves_nothing(lake):
    config, ledger = lake
    write_dead(config, [("p", 0, 2, 1), ("p", 0, 7, 1), ("p", 0, 15, 2), ("p", 1, 4, 1), ("other", 0, 3, 1)])
    before = ledger.state("p")
    plan = reserve(config, ledger)
    assert plan.entry_id == 3 and plan.ranges == [OffsetRange("t", 0, 2, 16), OffsetRange("t", 1, 4, 5)]
    assert plan.selected == {"t:0": 3, "t:1": 1} and plan.reason == "fixed" and plan.owner == "cli:me@here"
    assert reprocessing.ReprocessPlan.from_json(plan.to_json()) == plan
    rows = [r for r in ledger.rows("p") if r.kind == "reprocess"]
    assert [(r.batch_id, r.status, r.partition, r.dead_letter_count) for r in rows] == [(3, PLANNED, 0, 3),
                                                                                          (3, PLANNED, 1, 1)]
    after = ledger.state("p")
    assert after.positions == before.positions and after.high_water == before.high_water
    assert after.pending_batch_id is None and after.last_batch_id == 3


def test_one_batch_is_selected_alone_and_the_reason_says_which(lake):
    config, ledger = lake
    write_dead(config, [("p", 0, 2, 1), ("p", 0, 15, 2)])
    plan = reserve(config, ledger, batch_id=2)
    assert plan.ranges == [OffsetRange("t", 0, 15, 16)] and plan.selected == {"t:0": 1}
    assert plan.reason == "fixed (dead letters of batch 2)"
    assert "ingest_batch_id < 3" in plan.selection() and "pipeline = 'p'" in plan.selection()


def test_nothing_to_reprocess_reserves_nothing(lake):
    config, ledger = lake
    assert reserve(config, ledger) is None  # no dead-letter table at all
    write_dead(config, [("p", 0, 2, 1)])
    assert reserve(config, ledger, batch_id=2) is None
    assert not [r for r in ledger.rows("p") if r.kind == "reprocess"]


def test_refusals_name_what_to_do(lake):
    config, ledger = lake
    write_dead(config, [("p", 0, 2, 1)])
    with pytest.raises(ConfigError, match="needs a reason"):
        reserve(config, ledger, reason=" ")
    with pytest.raises(ConfigError, match=r"--batch 7: the ledger's batches of this pipeline are 1..2"):
        reserve(config, ledger, batch_id=7)
    ledger.append([LedgerRow("p", 3, "batch", PLANNED, "t", 0, 20, 30, dag_run_id="run-1")],
                  expected=ledger.state("p").fingerprint)
    with pytest.raises(PipelineBusyError, match="run the pipeline .* and reprocess afterwards"):
        reserve(config, ledger)


def test_a_keyed_table_is_refused_an_append_would_hold_a_key_twice(lake):
    _, ledger = lake
    keyed = parse_pipeline({"name": "p", "topics": ["t"], "table": "out", "value_format": "json",
                            "value_schema": {"id": "bigint"}, "keyed": {"keys": ["id"]}}, "test")
    write_dead(keyed, [("p", 0, 2, 1)])
    with pytest.raises(ConfigError, match="refused for keyed tables, nothing was changed.*produce a change"):
        reserve(keyed, ledger)
    assert all(r.kind == "batch" for r in ledger.rows("p"))  # no entry reserved


def test_an_unfinished_entry_is_resumed_and_its_commit_counts_what_left_the_dead_letters(lake):
    config, ledger = lake
    write_dead(config, [("p", 0, 2, 1), ("p", 0, 7, 1), ("p", 1, 4, 1)])
    first = reserve(config, ledger)
    resumed = reserve(config, ledger, batch_id=1, reason="another")
    assert resumed == first  # the planned entry first, as it was reserved
    from deltalake import DeltaTable

    DeltaTable(config.dead_letter_uri).delete("kafka_partition = 0 AND kafka_offset = 7")  # as the job's MERGE would
    counts = reprocessing.finalize(first)
    assert counts == {TP("t", 0): (1, 1), TP("t", 1): (0, 1)}
    assert reprocessing.outcome(ledger, "p", first.entry_id) == [
        {"topic": "t", "partition": 0, "offsets": "[2, 8)", "reprocessed": 1, "still_dead_letters": 1},
        {"topic": "t", "partition": 1, "offsets": "[4, 5)", "reprocessed": 0, "still_dead_letters": 1}]
    assert reprocessing.finalize(first) == counts  # again: nothing left to flip
    assert reserve(config, ledger).entry_id == 4  # a new entry once the old one is committed


def test_a_planned_reprocess_row_is_not_the_pending_batch():
    rows = [LedgerRow("p", 1, "batch", COMMITTED, "t", 0, 0, 10), LedgerRow("p", 2, "reprocess", PLANNED, "t", 0, 2, 8),
            LedgerRow("p", 3, "reprocess", COMMITTED, "t", 0, 2, 8, 1, 0)]
    state = derive_state(rows)
    assert state.pending_batch_id is None and state.positions == {TP("t", 0): 10}
    assert state.high_water == {TP("t", 0): 10} and state.last_batch_id == 3
    assert reprocessing.pending_entry(rows) == [rows[1]]
