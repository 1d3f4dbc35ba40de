"""Re-ingesting dead letters (``tidemark dead-letters reprocess``): after a fix (a schema registered again,
``schema_changes`` relaxed, a JSON schema widened), the kept raw bytes of dead letters are decoded again
with the pipeline's format as configured now; those that decode go to the output, the rest stay dead
letters with their new reason.

The protocol, an entry of the ledger like a reset (``kind = 'reprocess'``), which never moves a position:

1. **reserve** (here, no JVM): refused while a batch is pending. The selection (one batch's dead letters,
   or all of them) becomes, per partition, the offset span of its dead letters; one ``planned``
   ``reprocess`` row per partition records it with who (``dag_run_id``), when and why (``reason``) and
   how many dead letters it selected (``dead_letter_count``), appended with the ledger's compare-and-commit
   (two runs cannot take the same entry). A planned entry left by a run that died is resumed first.
2. **execute** (the Spark job ``tidemark_spark.reprocess``): decode the selected dead letters with
   ``tidemark.batch.spark.shaping.to_rows`` (what ingest does, so the rows are what ingest would have written; each
   keeps the ``ingest_batch_id`` of the batch that read it); append those that decode and whose Kafka coordinates
   the output does not hold yet, in one Delta commit with the entry's own marker (``txnAppId`` =
   ``REPROCESS_APP_PREFIX + pipeline``, ``txnVersion`` = the entry id: the ingest marker is untouched);
   then one MERGE on the dead-letter table (delta-rs) deletes every selected dead letter the output now
   holds and gives the others their new reason.
3. **commit** (``finalize``): count what is left of the selection, and flip the entry's rows to
   ``committed``: ``record_count`` = reprocessed into the output, ``dead_letter_count`` = left.

Every step can be repeated: the output write skips coordinates already there (and Delta skips a second
commit of the marker), the MERGE matches only what is left, and the flip only planned rows. A run killed
anywhere is finished by the next one (``pending_entry``). Reprocessed dead letters are removed from the
dead-letter table, not marked: the ledger entry says who, when, why and how many, and Delta's history
keeps the removed rows until VACUUM.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from tidemark import storage
from tidemark.batch.prepare import freeze_schemas
from tidemark.batch.schemas import batch_format
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import ConfigError, PipelineBusyError
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.schema_registry import SchemaSource
from tidemark.kafka.offsets import OffsetRange, TopicPartition, describe_ranges
from tidemark.ledger.state import KIND_REPROCESS
from tidemark.ledger.store import COMMITTED, PLANNED, Ledger, LedgerRow, now
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)

REPROCESS_APP_PREFIX = "tidemark-reprocess:"
"""The output commit of a reprocess entry carries ``txnAppId = REPROCESS_APP_PREFIX + pipeline``."""


@dataclass
class ReprocessPlan:
    """A reserved reprocess entry, as handed to the Spark job (small JSON, no secrets)."""

    pipeline: str
    entry_id: int
    table_uri: str
    dead_letter_uri: str
    ledger_uri: str
    ranges: list[OffsetRange] = field(default_factory=list)
    """Per partition, the offsets whose dead letters are selected."""
    selected: dict[str, int] = field(default_factory=dict)
    """Per partition (``topic:partition``), the dead letters selected when the entry was reserved."""
    record_format: RecordFormat = field(default_factory=RecordFormat)
    partition_by: list[str] = field(default_factory=list)
    owner: str | None = None
    reason: str | None = None

    @property
    def format(self) -> RecordFormat:
        return self.record_format

    @property
    def app_id(self) -> str:
        return REPROCESS_APP_PREFIX + self.pipeline

    def to_json(self) -> str:
        return json.dumps(dict(self.__dict__, ranges=[r.to_dict() for r in self.ranges],
                               record_format=self.record_format.to_dict()), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ReprocessPlan:
        data = json.loads(text)
        data["ranges"] = [OffsetRange.from_dict(r) for r in data["ranges"]]
        data["record_format"] = RecordFormat.from_dict(data["record_format"])
        return cls(**data)

    def selection(self) -> str:
        """The SQL predicate of the selected dead letters (DataFusion and Spark SQL read it alike)."""
        return selection_sql(self.pipeline, self.entry_id, self.ranges)

    def commit_metadata(self) -> str:
        return json.dumps({"tidemark": {"pipeline": self.pipeline, "reprocess_entry": self.entry_id,
                                        "ranges": [r.to_dict() for r in self.ranges]}}, sort_keys=True)


def _quote(text: str) -> str:
    return text.replace("'", "''")


def ranges_sql(ranges: list[OffsetRange]) -> str:
    """Rows whose Kafka coordinates lie within ``ranges``."""
    return " OR ".join(f"(kafka_topic = '{_quote(r.topic)}' AND kafka_partition = {int(r.partition)} AND "
                       f"kafka_offset >= {int(r.start)} AND kafka_offset < {int(r.end)})" for r in ranges) or "FALSE"


def selection_sql(pipeline: str, entry_id: int, ranges: list[OffsetRange], batch_id: int | None = None) -> str:
    """The pipeline's dead letters of batches before the entry (or of one batch) within ``ranges``."""
    batch = f"ingest_batch_id = {int(batch_id)}" if batch_id is not None else f"ingest_batch_id < {int(entry_id)}"
    return f"pipeline = '{_quote(pipeline)}' AND {batch} AND ({ranges_sql(ranges)})"


def _spans(uri: str, store: ObjectStore | None, predicate: str) -> dict[TopicPartition, tuple[int, int, int]]:
    """Per partition, (count, first offset, last offset) of the dead letters matching ``predicate``."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = storage.open_table(uri, store)
    if table is None:
        return {}
    sql = ("SELECT kafka_topic AS t, kafka_partition AS p, COUNT(*) AS n, MIN(kafka_offset) AS lo, "
           f"MAX(kafka_offset) AS hi FROM dead WHERE {predicate} GROUP BY kafka_topic, kafka_partition")
    rows = pa.table(QueryBuilder().register("dead", table).execute(sql).read_all()).to_pylist()
    return {TopicPartition(r["t"], int(r["p"])): (int(r["n"]), int(r["lo"]), int(r["hi"])) for r in rows}


def pending_entry(rows: list[LedgerRow]) -> list[LedgerRow]:
    """The rows of the newest reprocess entry still planned (a run that died before its commit)."""
    planned = [r for r in rows if r.kind == KIND_REPROCESS and r.status == PLANNED]
    if not planned:
        return []
    newest = max(r.batch_id for r in planned)
    return sorted((r for r in planned if r.batch_id == newest), key=lambda r: (r.topic, r.partition))


def plan_of(config: PipelineConfig, ledger: Ledger, rows: list[LedgerRow], fmt: RecordFormat) -> ReprocessPlan:
    """The plan of a reserved entry (its planned rows)."""
    first = rows[0]
    return ReprocessPlan(config.name, first.batch_id, config.table_uri, config.dead_letter_uri, ledger.uri,
                         [r.range for r in rows], {str(r.tp): int(r.dead_letter_count or 0) for r in rows},
                         fmt, list(config.partition_by), first.dag_run_id, first.reason)


def reserve(config: PipelineConfig, ledger: Ledger, schemas: SchemaSource | None, *, batch_id: int | None,
            reason: str, owner: str, store: ObjectStore | None = None) -> ReprocessPlan | None:
    """Reserve a reprocess entry for the pipeline's dead letters (of one batch when ``batch_id`` is given),
    or return the entry a dead run left planned (resumed first, whatever was asked). None when there is
    no dead letter to reprocess. The format is the pipeline's as configured now, checked against the output
    table as a batch's is (``tidemark.batch.schemas.batch_format``; Avro schemas read from ``schemas``, the registry,
    now)."""
    if not (reason or "").strip():
        raise ConfigError("reprocessing dead letters needs a reason (--reason); it is written to the ledger",
                          pipeline=config.name)
    if config.keyed is not None:
        raise ConfigError("reprocessing dead letters appends them to the output, and a keyed table holds one row per "
                          "key, written by its MERGE in the order of its changes: refused for keyed tables, nothing "
                          "was changed. The dead letters stay; produce a change that is still wanted to the topic "
                          "again, and the next batch applies it in its order", pipeline=config.name)
    state = ledger.state(config.name)
    if state.pending_batch_id is not None:
        raise PipelineBusyError.pending_batch(
            config.name, state.pending_owner, state.pending_batch_id, "reprocessing dead letters: nothing was changed; "
            "run the pipeline (or wait for the active run) and reprocess afterwards")
    fmt = batch_format(config, freeze_schemas(config, schemas), store)
    left = pending_entry(ledger.rows(config.name))
    if left:
        log.warning("pipeline '%s': reprocess entry %d (by %s) was left unfinished; finishing it first", config.name,
                    left[0].batch_id, left[0].dag_run_id)
        return plan_of(config, ledger, left, fmt)
    entry_id = state.last_batch_id + 1
    if batch_id is not None and not 0 < batch_id < entry_id:
        raise ConfigError(f"--batch {batch_id}: the ledger's batches of this pipeline are 1..{state.last_batch_id}",
                          pipeline=config.name)
    everything = f"pipeline = '{_quote(config.name)}' AND ingest_batch_id < {entry_id}"
    spans = _spans(config.dead_letter_uri, store, everything if batch_id is None else
                   f"{everything} AND ingest_batch_id = {int(batch_id)}")
    if not spans:
        return None
    ranges = [OffsetRange(tp.topic, tp.partition, lo, hi + 1) for tp, (_, lo, hi) in sorted(spans.items())]
    counts = _spans(config.dead_letter_uri, store, selection_sql(config.name, entry_id, ranges))
    at = now()
    why = reason if batch_id is None else f"{reason} (dead letters of batch {batch_id})"
    rows = [LedgerRow(config.name, entry_id, KIND_REPROCESS, PLANNED, r.topic, r.partition, r.start, r.end,
                      dead_letter_count=counts[r.tp][0], dag_run_id=owner, reason=why, planned_at=at,
                      topic_id=state.topic_ids.get(r.topic))
             for r in ranges]
    ledger.append(rows, expected=state.fingerprint, what="reprocessing dead letters")
    log.info("pipeline '%s': reprocess entry %d reserved by %s: %d dead letters of %s", config.name, entry_id, owner,
             sum(c for c, _, _ in counts.values()), describe_ranges(ranges))
    return plan_of(config, ledger, rows, fmt)


def finalize(plan: ReprocessPlan, store: ObjectStore | None = None) -> dict[TopicPartition, tuple[int, int]]:
    """Count what is left of the selection and commit the entry's rows: per partition (reprocessed into
    the output, left as dead letters). Idempotent (only planned rows flip)."""
    left = _spans(plan.dead_letter_uri, store, plan.selection())
    counts = {}
    for r in plan.ranges:
        remaining = left.get(r.tp, (0, 0, 0))[0]
        counts[r.tp] = (max(plan.selected.get(str(r.tp), 0) - remaining, 0), remaining)
    Ledger(plan.ledger_uri, store).mark_committed(plan.pipeline, plan.entry_id, counts)
    return counts


def outcome(ledger: Ledger, pipeline: str, entry_id: int) -> list[dict]:
    """The committed rows of a reprocess entry, per partition, for people."""
    return [{"topic": r.topic, "partition": r.partition, "offsets": f"[{r.start_offset}, {r.end_offset})",
             "reprocessed": r.record_count, "still_dead_letters": r.dead_letter_count}
            for r in sorted(ledger.batch(pipeline, entry_id), key=lambda r: (r.topic, r.partition))
            if r.kind == KIND_REPROCESS and r.status == COMMITTED]
