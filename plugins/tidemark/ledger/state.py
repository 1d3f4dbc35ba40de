"""The ledger's rows and what they say (pure: no I/O). ``tidemark.ledger.store`` stores them.

One row per (pipeline, batch, topic, partition). A batch's rows are appended with status
``planned`` when its ranges are frozen, and flipped to ``committed`` (with record counts) once
the output table holds the batch. The latest committed row per partition is the committed
position. See docs/DESIGN.md for the protocol.

The table records its schema version (tidemark.ledger.migrations): reads take an older ledger as it is, the first
write of a process migrates it, and a ledger from a newer release is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from tidemark.kafka.offsets import OffsetRange, TopicPartition

PLANNED = "planned"
COMMITTED = "committed"
KIND_BATCH = "batch"
KIND_GAP = "gap"
# Dead letters re-ingested (tidemark.operations.reprocessing): history only, it moves no position and its records were
# counted by the batches that read them; a planned one is the reprocess's own, never the pipeline's pending batch.
KIND_REPROCESS = "reprocess"
# Kinds whose committed rows move the position (backfill rows are history only).
POSITION_KINDS = ("batch", "reset", "gap")
# Kinds whose rows wrote records to the output.
WRITING_KINDS = ("batch", "backfill")

SCHEMA = pa.schema([
    pa.field("pipeline", pa.string(), nullable=False),
    pa.field("batch_id", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("start_offset", pa.int64(), nullable=False),
    pa.field("end_offset", pa.int64(), nullable=False),
    pa.field("record_count", pa.int64()),
    pa.field("dead_letter_count", pa.int64()),
    pa.field("dag_run_id", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("planned_at", pa.timestamp("us", tz="UTC")),
    pa.field("committed_at", pa.timestamp("us", tz="UTC")),
    # Kafka's id of the topic the range was read from (changes when a topic is deleted and
    # recreated). Added after the first release: a schema version 1 ledger may lack it (its rows read
    # null); migrating it to version 2 adds the column (tidemark.ledger.migrations).
    pa.field("topic_id", pa.string()),
    # The schemas the batch decodes with (Avro values and keys from a Schema Registry:
    # ``tidemark.batch.schemas.BatchSchemas`` as JSON), frozen with its planned rows so a retry decodes exactly as
    # planned, registry or not.
    # Added in schema version 3 (tidemark.ledger.migrations); null for other formats and older rows.
    pa.field("frozen_schemas", pa.string()),
    # What a keyed batch's MERGE did to the table's rows (Delta's operation metrics of its commit): the
    # batch's totals, on the batch's first row only (``changes_row``), null on its other rows, on appends
    # and on older rows. Added in schema version 4.
    pa.field("rows_inserted", pa.int64()),
    pa.field("rows_updated", pa.int64()),
    pa.field("rows_deleted", pa.int64()),
    # The good records of the range that the pipeline's SQL transform gave no output row
    # (``tidemark.config.transforms``), per partition: null for a pipeline without a transform and on older rows. Added
    # in schema version 5.
    pa.field("filtered_count", pa.int64()),
    # What shapes the batch's output, frozen with its planned rows (``BatchPlan.frozen``: the decoded format with
    # its schemas, keys, ordering and transform, the partition columns, the isolation level): recovery executes a
    # pending batch with them, whatever the pipeline file says by then. Added in schema version 6; null on
    # resets, gaps and older rows (a pending batch without it is executed with the pipeline file as it is).
    pa.field("frozen_plan", pa.string()),
])
# A new column, or any other change to the table's shape, is a new schema version: see tidemark.ledger.migrations.


@dataclass(frozen=True)
class LedgerRow:
    pipeline: str
    batch_id: int
    kind: str
    status: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    record_count: int | None = None
    dead_letter_count: int | None = None
    dag_run_id: str | None = None
    reason: str | None = None
    planned_at: dt.datetime | None = None
    committed_at: dt.datetime | None = None
    topic_id: str | None = None
    frozen_schemas: str | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    filtered_count: int | None = None
    frozen_plan: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start_offset, self.end_offset)


class RowChanges(NamedTuple):
    """What one keyed batch did to its table's rows: rows inserted, updated and deleted (Delta's operation
    metrics of the batch's commit). One per batch, not per partition: one MERGE applies the whole batch."""

    inserted: int
    updated: int
    deleted: int


CHANGE_COLUMNS = ("rows_inserted", "rows_updated", "rows_deleted")


def changes_row(tps: Iterable[TopicPartition]) -> TopicPartition | None:
    """The partition whose ledger row carries a batch's RowChanges: the first by topic and partition (its other
    rows hold null), so that summing the column over any set of rows counts each batch once."""
    return min(tps, default=None)


def batch_changes(rows: Iterable[LedgerRow]) -> RowChanges | None:
    """A batch's RowChanges from its rows (the sum of what they carry, whichever row that is); None when no row
    carries any (an append, a reset, a gap, or a batch committed before schema version 4)."""
    rows = [r for r in rows if r.rows_inserted is not None]
    if not rows:
        return None
    return RowChanges(*(sum(getattr(r, c) or 0 for r in rows) for c in CHANGE_COLUMNS))


def commit_source(pipeline: str, batch_id: int, counts: Mapping[TopicPartition, tuple[int, int]],
                  changes: RowChanges | None = None, filtered: Mapping[TopicPartition, int] | None = None
                  ) -> pa.Table:
    """The rows ``Ledger.mark_committed`` merges into the batch's planned rows: per partition its (records, dead
    letters), the batch's ``changes`` on the ``changes_row`` (null elsewhere, and everywhere without), and per
    partition the records the transform ``filtered`` out (0 for a partition the mapping lacks; null without one)."""
    carrier = changes_row(counts) if changes is not None else None
    picked = [changes if tp == carrier else None for tp in counts]
    columns = {
        "pipeline": [pipeline] * len(counts),
        "batch_id": [batch_id] * len(counts),
        "topic": [tp.topic for tp in counts],
        "partition": pa.array([tp.partition for tp in counts], pa.int32()),
        "record_count": pa.array([c for c, _ in counts.values()], pa.int64()),
        "dead_letter_count": pa.array([d for _, d in counts.values()], pa.int64()),
    }
    for i, name in enumerate(CHANGE_COLUMNS):
        columns[name] = pa.array([None if p is None else p[i] for p in picked], pa.int64())
    columns["filtered_count"] = pa.array([None if filtered is None else filtered.get(tp, 0) for tp in counts],
                                         pa.int64())
    return pa.table(columns)


@dataclass
class LedgerState:
    """What the ledger says about one pipeline (derived, pure)."""

    positions: dict[TopicPartition, int] = field(default_factory=dict)
    last_batch: dict[TopicPartition, int] = field(default_factory=dict)
    last_batch_id: int = 0
    pending_batch_id: int | None = None
    pending_ranges: list[OffsetRange] = field(default_factory=list)
    pending_owner: str | None = None
    fingerprint: str = ""
    high_water: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, the end of the highest range ever written (batches and backfills): offsets
    below it may already be in the output, so a batch that starts below it is deduplicated."""
    topic_ids: dict[str, str] = field(default_factory=dict)
    """Per topic, the Kafka topic id of its newest ledger row that has one (the incarnation of the
    topic the position refers to)."""
    pending_schemas: str | None = None
    """The pending batch's frozen schemas (JSON), when its format has any."""
    pending_plan: str | None = None
    """The pending batch's frozen settings (``BatchPlan.frozen``), when it was planned by schema version 6."""


def derive_state(rows: list[LedgerRow]) -> LedgerState:
    """Positions from committed rows, in batch order; the pending batch is the highest batch
    whose rows are still ``planned``."""
    state = LedgerState()
    for row in sorted(rows, key=lambda r: (r.batch_id, r.topic, r.partition)):
        state.last_batch_id = max(state.last_batch_id, row.batch_id)
        if row.topic_id:
            if state.topic_ids.get(row.topic, row.topic_id) != row.topic_id:
                # A new incarnation of the topic (recreated, then reset onto): positions and written
                # offsets of the old one number other records. Partitions the reset did not cover start
                # from the configured start position, like new partitions.
                for seen in (state.positions, state.last_batch, state.high_water):
                    for tp in [tp for tp in seen if tp.topic == row.topic]:
                        del seen[tp]
            state.topic_ids[row.topic] = row.topic_id
        if row.status == COMMITTED and row.kind in POSITION_KINDS:
            state.positions[row.tp] = row.end_offset
            state.last_batch[row.tp] = row.batch_id
        if row.status == COMMITTED and row.kind in WRITING_KINDS:
            state.high_water[row.tp] = max(state.high_water.get(row.tp, 0), row.end_offset)
    pending = [r for r in rows if r.status == PLANNED and r.kind != KIND_REPROCESS]
    if pending:
        state.pending_batch_id = max(r.batch_id for r in pending)
        current = [r for r in pending if r.batch_id == state.pending_batch_id]
        state.pending_ranges = sorted(r.range for r in current)
        state.pending_owner = current[0].dag_run_id
        state.pending_schemas = next((r.frozen_schemas for r in current if r.frozen_schemas), None)
        state.pending_plan = next((r.frozen_plan for r in current if r.frozen_plan), None)
    state.fingerprint = fingerprint(rows)
    return state


def fingerprint(rows: list[LedgerRow]) -> str:
    """A digest of everything a run of the pipeline can change in its rows: two reads with the same
    fingerprint saw the same pipeline state, whatever other pipelines did to the table."""
    keys = sorted((r.batch_id, r.kind, r.status, r.topic, r.partition, r.start_offset, r.end_offset,
                   r.dag_run_id or "") for r in rows)
    return hashlib.sha256(repr(keys).encode()).hexdigest()


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def planned_rows(pipeline: str, batch_id: int, ranges: list[OffsetRange], dag_run_id: str | None,
                 kind: str = KIND_BATCH, reason: str | None = None,
                 topic_ids: Mapping[str, str] | None = None, frozen_schemas: str | None = None,
                 frozen_plan: str | None = None) -> list[LedgerRow]:
    at = now()
    ids = topic_ids or {}
    return [LedgerRow(pipeline, batch_id, kind, PLANNED, r.topic, r.partition, r.start, r.end,
                      dag_run_id=dag_run_id, reason=reason, planned_at=at, topic_id=ids.get(r.topic),
                      frozen_schemas=frozen_schemas, frozen_plan=frozen_plan)
            for r in ranges]


def gap_rows(pipeline: str, batch_id: int, gaps: list[OffsetRange], dag_run_id: str | None,
             topic_ids: Mapping[str, str] | None = None) -> list[LedgerRow]:
    """Committed ``gap`` rows: offsets deleted by retention before they were read, skipped under
    ``on_data_loss: skip``. They move the position to the end of the gap and hold no records."""
    at = now()
    ids = topic_ids or {}
    return [LedgerRow(pipeline, batch_id, KIND_GAP, COMMITTED, g.topic, g.partition, g.start, g.end,
                      record_count=0, dead_letter_count=0, dag_run_id=dag_run_id,
                      reason=f"offsets [{g.start}, {g.end}) deleted by retention before they were ingested "
                             f"(on_data_loss: skip)", planned_at=at, committed_at=at, topic_id=ids.get(g.topic))
            for g in gaps]


