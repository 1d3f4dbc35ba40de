"""The commit protocol (see docs/DESIGN.md).

* The commit point of batch N is the output table's own Delta commit carrying the idempotency
  marker ``txnAppId = <pipeline>``, ``txnVersion = N`` and the batch's ranges in ``userMetadata``.
* The ledger's planned rows of batch N are flipped to committed afterwards, idempotently.
* Recovery (start of every run): a planned batch whose marker is in the output table is rolled
  forward; one whose marker is not is executed again with the same frozen ranges.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Literal

from tidemark import faults
from tidemark.errors import ReconciliationError
from tidemark.ledger import Ledger
from tidemark.offsets import OffsetRange, TopicPartition
from tidemark.records import RecordFormat

log = logging.getLogger(__name__)

METADATA_KEY = "tidemark"


@dataclass
class BatchPlan:
    """A frozen batch, as handed from the plan task to the ingest job (no secrets in it)."""

    pipeline: str
    batch_id: int
    table_uri: str
    ledger_uri: str
    ranges: list[OffsetRange] = field(default_factory=list)
    recovered: bool = False
    run_id: str | None = None
    """The run that owns (froze or took over) the batch; only it may execute the batch."""
    dead_letter_uri: str | None = None
    dedupe: bool = False
    """Some ranges may already be in the output (after a reset back in time, or a backfill):
    records whose Kafka coordinates are already in the output or dead letters are skipped."""
    record_format: dict = field(default_factory=lambda: RecordFormat().to_dict())
    """How values are parsed and what makes a record bad (``records.RecordFormat`` as a dict)."""
    partition_by: list[str] = field(default_factory=list)
    """The output table's partition columns."""
    kafka_timeout_seconds: int = 30
    """How long the Spark read waits for Kafka before the batch fails (nothing committed)."""

    @property
    def format(self) -> RecordFormat:
        return RecordFormat.from_dict(self.record_format)

    @property
    def is_empty(self) -> bool:
        return all(r.size == 0 for r in self.ranges)

    @property
    def total_offsets(self) -> int:
        return sum(r.size for r in self.ranges)

    def to_json(self) -> str:
        data = dict(self.__dict__, ranges=[r.to_dict() for r in self.ranges])
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BatchPlan:
        data = json.loads(text)
        data["ranges"] = [OffsetRange.from_dict(r) for r in data["ranges"]]
        return cls(**data)

    def commit_metadata(self) -> str:
        """The ``userMetadata`` of the output commit: which batch and ranges it holds."""
        return json.dumps({METADATA_KEY: {"pipeline": self.pipeline, "batch_id": self.batch_id,
                                          "ranges": [r.to_dict() for r in self.ranges]}}, sort_keys=True)


Recovery = Literal["none", "roll_forward", "re_execute"]


def decide_recovery(pending_batch_id: int | None, output_txn_version: int | None) -> Recovery:
    """What to do with an unfinished batch, from the ledger's pending batch and the output
    table's idempotency marker for the pipeline."""
    if pending_batch_id is None:
        return "none"
    if output_txn_version is not None and output_txn_version >= pending_batch_id:
        return "roll_forward"
    return "re_execute"


def output_txn_version(table_uri: str, pipeline: str) -> int | None:
    """The highest batch id the output table has committed for this pipeline (None if none)."""
    from deltalake import DeltaTable

    try:
        table = DeltaTable(table_uri)
    except Exception as exc:
        if type(exc).__name__ == "TableNotFoundError":
            return None
        raise
    return table.transaction_version(pipeline)


@dataclass(frozen=True)
class Tally:
    """What Spark read for one partition of a batch, counted before anything is written."""

    records: int
    bad: int
    min_offset: int | None
    max_offset: int | None


def batch_tallies(table_uri: str | None, batch_id: int) -> dict[TopicPartition, Tally]:
    """Records and offset span per partition that a table (output or dead letters) holds for one
    batch; empty if the table does not exist. delta-rs, no JVM."""
    if not table_uri:
        return {}
    from deltalake import DeltaTable, QueryBuilder

    try:
        table = DeltaTable(table_uri)
    except Exception as exc:
        if type(exc).__name__ == "TableNotFoundError":
            return {}
        raise
    reader = QueryBuilder().register("output", table).execute(
        "SELECT kafka_topic, kafka_partition, COUNT(*) AS n, MIN(kafka_offset) AS lo, MAX(kafka_offset) AS hi "
        f"FROM output WHERE ingest_batch_id = {int(batch_id)} GROUP BY kafka_topic, kafka_partition")
    import pyarrow as pa

    rows = pa.table(reader.read_all()).to_pylist()
    return {TopicPartition(r["kafka_topic"], int(r["kafka_partition"])):
            Tally(int(r["n"]), 0, int(r["lo"]), int(r["hi"])) for r in rows}


def count_batch_records(table_uri: str | None, batch_id: int) -> dict[TopicPartition, int]:
    """Records per partition that a table holds for one batch."""
    return {tp: t.records for tp, t in batch_tallies(table_uri, batch_id).items()}


def _stored(written: dict[TopicPartition, Tally], dead: dict[TopicPartition, Tally]) -> dict[TopicPartition, Tally]:
    """Output and dead letters together, per partition (``bad`` = dead letters)."""
    stored = {}
    for tp in written.keys() | dead.keys():
        parts = [t for t in (written.get(tp), dead.get(tp)) if t is not None]
        stored[tp] = Tally(sum(t.records for t in parts), dead[tp].records if tp in dead else 0,
                           min(t.min_offset for t in parts), max(t.max_offset for t in parts))
    return stored


def check_read(plan: BatchPlan, tallies: dict[TopicPartition, Tally], *, source: str = "Spark returned",
               outcome: str = "nothing was written") -> None:
    """Records of the frozen ranges only: every offset inside its range, no more records than
    offsets, no partition outside the plan. ``tallies`` are what Spark read (before writing) or what
    the tables hold for the batch (before the ledger commit). Raises ReconciliationError."""
    ranges = {r.tp: r for r in plan.ranges}
    for tp, tally in tallies.items():
        r = ranges.get(tp)
        if r is None:
            raise ReconciliationError(f"{source} records of {tp}, which batch {plan.batch_id} does not read; "
                                      f"{outcome}", pipeline=plan.pipeline)
        if tally.records > r.size or (tally.records and not (r.start <= tally.min_offset and tally.max_offset < r.end)):
            raise ReconciliationError(
                f"{tp}: {source} {tally.records} records with offsets {tally.min_offset}..{tally.max_offset} "
                f"for the frozen range [{r.start}, {r.end}) of batch {plan.batch_id}; {outcome}",
                pipeline=plan.pipeline)


def finalize_batch(plan: BatchPlan, tallies: dict[TopicPartition, Tally] | None = None,
                   records_read: int | None = None) -> bool:
    """Count the batch's records in the output and the dead-letter table, check they lie within
    the frozen ranges, and flip its ledger rows to committed with those counts. With the ``tallies``
    Spark counted before writing, or the ``records_read`` it counted while writing, a mismatch raises
    ReconciliationError and leaves the ledger untouched. Idempotent; returns False when the ledger
    already had the batch committed."""
    output = batch_tallies(plan.table_uri, plan.batch_id)
    dead_letters = batch_tallies(plan.dead_letter_uri, plan.batch_id)
    written = {tp: t.records for tp, t in output.items()}
    dead = {tp: t.records for tp, t in dead_letters.items()}
    held = _stored(output, dead_letters)
    check_read(plan, held, source="the output and dead-letter tables hold",
               outcome="the ledger was not committed. Investigate before re-running")
    if records_read is not None and records_read != sum(t.records for t in held.values()):
        raise ReconciliationError(
            f"batch {plan.batch_id}: Spark read {records_read} records from Kafka for "
            f"{', '.join(f'{r.tp} [{r.start}, {r.end})' for r in plan.ranges)} but the output and dead-letter "
            f"tables hold {sum(t.records for t in held.values())}; the ledger was not committed. Investigate "
            f"before re-running.", pipeline=plan.pipeline)
    if tallies is not None:
        for r in plan.ranges:
            t = tallies.get(r.tp, Tally(0, 0, None, None))
            if (written.get(r.tp, 0), dead.get(r.tp, 0)) != (t.records - t.bad, t.bad):
                raise ReconciliationError(
                    f"{r.tp}: Kafka returned {t.records} records for [{r.start}, {r.end}) ({t.bad} bad) but the output "
                    f"holds {written.get(r.tp, 0)} and the dead-letter table {dead.get(r.tp, 0)} for batch "
                    f"{plan.batch_id}; the ledger was not committed. Investigate before re-running.",
                    pipeline=plan.pipeline)
    counts = {r.tp: (written.get(r.tp, 0) + dead.get(r.tp, 0), dead.get(r.tp, 0)) for r in plan.ranges}
    faults.crash_soon(faults.DURING_LEDGER_COMMIT)
    changed = Ledger(plan.ledger_uri).mark_committed(plan.pipeline, plan.batch_id, counts)
    log.info("pipeline '%s': batch %d %s in the ledger (%d records, %d dead letters)", plan.pipeline, plan.batch_id,
             "committed" if changed else "was already committed", sum(c for c, _ in counts.values()),
             sum(d for _, d in counts.values()))
    return changed
