"""The ledger: a Delta table of every pipeline's offset ranges and their history, read and
written with delta-rs (no JVM).

One row per (pipeline, batch, topic, partition). A batch's rows are appended with status
``planned`` when its ranges are frozen, and flipped to ``committed`` (with record counts) once
the output table holds the batch. The latest committed row per partition is the committed
position. See docs/DESIGN.md for the protocol.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field

import pyarrow as pa

from tidemark.errors import LedgerConflictError, PipelineBusyError
from tidemark.offsets import OffsetRange, TopicPartition

_CAS_ATTEMPTS = 20
PLANNED = "planned"
COMMITTED = "committed"
KIND_BATCH = "batch"
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
])


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

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start_offset, self.end_offset)


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


def derive_state(rows: list[LedgerRow]) -> LedgerState:
    """Positions from committed rows, in batch order; the pending batch is the highest batch
    whose rows are still ``planned``."""
    state = LedgerState()
    for row in sorted(rows, key=lambda r: (r.batch_id, r.topic, r.partition)):
        state.last_batch_id = max(state.last_batch_id, row.batch_id)
        if row.status == COMMITTED and row.kind in POSITION_KINDS:
            state.positions[row.tp] = row.end_offset
            state.last_batch[row.tp] = row.batch_id
        if row.status == COMMITTED and row.kind in WRITING_KINDS:
            state.high_water[row.tp] = max(state.high_water.get(row.tp, 0), row.end_offset)
    pending = [r for r in rows if r.status == PLANNED]
    if pending:
        state.pending_batch_id = max(r.batch_id for r in pending)
        current = [r for r in pending if r.batch_id == state.pending_batch_id]
        state.pending_ranges = sorted(r.range for r in current)
        state.pending_owner = current[0].dag_run_id
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
                 kind: str = KIND_BATCH, reason: str | None = None) -> list[LedgerRow]:
    at = now()
    return [LedgerRow(pipeline, batch_id, kind, PLANNED, r.topic, r.partition, r.start, r.end,
                      dag_run_id=dag_run_id, reason=reason, planned_at=at) for r in ranges]


def _table(rows: list[LedgerRow]) -> pa.Table:
    columns = {f.name: [getattr(r, f.name) for r in rows] for f in SCHEMA}
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def _select(table, pipeline: str) -> list[LedgerRow]:
    """One pipeline's rows. Uses delta-rs' own query engine: reading through pyarrow datasets
    leaves threads that abort the interpreter at exit (seen with deltalake 1.6.6)."""
    from deltalake import QueryBuilder

    quoted = pipeline.replace("'", "''")
    reader = QueryBuilder().register("ledger", table).execute(
        f"SELECT * FROM ledger WHERE pipeline = '{quoted}'")
    data = pa.table(reader.read_all())
    return [LedgerRow(**rec) for rec in data.to_pylist()]


def _is_missing_table(exc: Exception) -> bool:
    return type(exc).__name__ == "TableNotFoundError" or "no log files" in str(exc).lower()


class Ledger:
    """delta-rs access to the ledger table at ``uri``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def _open(self):
        from deltalake import DeltaTable

        try:
            return DeltaTable(self.uri)
        except Exception as exc:  # delta-rs raises TableNotFoundError for a missing table
            if _is_missing_table(exc):
                return None
            raise

    def version(self) -> int:
        table = self._open()
        return -1 if table is None else table.version()

    def rows(self, pipeline: str) -> list[LedgerRow]:
        """Every row of one pipeline."""
        table = self._open()
        return [] if table is None else _select(table, pipeline)

    def state(self, pipeline: str) -> LedgerState:
        """The pipeline's derived state (positions, pending batch, fingerprint)."""
        return derive_state(self.rows(pipeline))

    def _create(self, rows: list[LedgerRow]) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, _table(rows), mode="error", partition_by=["pipeline"], name="tidemark_offsets",
                        description="Tidemark offset ledger: one row per pipeline, batch, topic, partition")

    def _compare_and_commit(self, pipeline: str, expected: str, commit, what: str) -> None:
        """Run ``commit(table)`` against the latest ledger version only if the pipeline's rows still
        have the ``expected`` fingerprint, and only if no one commits to the ledger in between
        (``max_commit_retries=0``). Commits of other pipelines make it re-check and try again; a
        change to this pipeline's rows means another run got there first: PipelineBusyError."""
        from deltalake.exceptions import CommitFailedError

        for _ in range(_CAS_ATTEMPTS):
            table = self._open()
            current = fingerprint(_select(table, pipeline)) if table is not None else fingerprint([])
            if current != expected:
                raise PipelineBusyError(
                    f"another run holds the pipeline: its ledger rows changed while this run was {what}; "
                    "this run wrote nothing. Only one run of a pipeline may run at a time "
                    "(max_active_runs=1); retry once the other run has finished.", pipeline=pipeline)
            try:
                commit(table)
                return
            except CommitFailedError:
                continue  # another commit (any pipeline) landed first: re-check and retry
            except Exception as exc:
                if table is None and "exists" in str(exc).lower():
                    continue  # another run created the ledger at the same moment
                raise
        raise LedgerConflictError(f"the ledger was too busy to commit after {_CAS_ATTEMPTS} attempts "
                                  f"while {what}; this run wrote nothing, retry it", pipeline=pipeline)

    def append(self, rows: list[LedgerRow], *, expected: str, what: str = "planning") -> None:
        """Append rows for one pipeline if its rows are still as the caller read them."""
        from deltalake import CommitProperties, write_deltalake

        def commit(table) -> None:
            if table is None:
                self._create(rows)
            else:
                write_deltalake(table, _table(rows), mode="append",
                                commit_properties=CommitProperties(max_commit_retries=0))

        self._compare_and_commit(rows[0].pipeline, expected, commit, what)

    def take_over(self, pipeline: str, batch_id: int, owner: str, *, expected: str) -> None:
        """Make ``owner`` the run that executes the pending batch (after its previous owner died)."""
        from deltalake import CommitProperties

        def commit(table) -> None:
            quoted = owner.replace("'", "''")
            table.update(predicate=f"pipeline = '{pipeline}' AND batch_id = {int(batch_id)} AND status = '{PLANNED}'",
                         updates={"dag_run_id": f"'{quoted}'"},
                         commit_properties=CommitProperties(max_commit_retries=0))

        self._compare_and_commit(pipeline, expected, commit, f"taking over batch {batch_id}")

    def mark_committed(self, pipeline: str, batch_id: int, counts: dict[TopicPartition, tuple[int, int]]) -> bool:
        """Flip the batch's planned rows to committed with their (records, dead letters) counts.
        Idempotent: returns False when nothing was left to flip."""
        from deltalake import DeltaTable

        table = DeltaTable(self.uri)
        source = pa.table({
            "pipeline": [pipeline] * len(counts),
            "batch_id": [batch_id] * len(counts),
            "topic": [tp.topic for tp in counts],
            "partition": pa.array([tp.partition for tp in counts], pa.int32()),
            "record_count": pa.array([c for c, _ in counts.values()], pa.int64()),
            "dead_letter_count": pa.array([d for _, d in counts.values()], pa.int64()),
        })
        stamp = now().isoformat()
        metrics = (
            table.merge(source, source_alias="s", target_alias="t",
                        predicate=("t.pipeline = s.pipeline AND t.batch_id = s.batch_id AND "
                                   "t.topic = s.topic AND t.partition = s.partition"))
            .when_matched_update(
                updates={"status": f"'{COMMITTED}'", "record_count": "s.record_count",
                         "dead_letter_count": "s.dead_letter_count",
                         "committed_at": f"CAST('{stamp}' AS TIMESTAMP)"},
                predicate=f"t.status = '{PLANNED}'")
            .execute()
        )
        return metrics.get("num_target_rows_updated", 0) > 0
