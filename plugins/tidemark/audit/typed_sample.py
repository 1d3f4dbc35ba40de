"""The typed part of ``tidemark audit PIPELINE --verify-sample N``: for a pipeline whose output keeps typed
columns (``value_format`` json or avro, or ``key_format: avro``), the sampled ranges are decoded again by the
ingest decoder (``tidemark.batch.spark.shaping.to_rows``) with each batch's own format and compared, record by record,
with what the output and dead-letter tables hold at those Kafka coordinates. The Spark side is
``tidemark_spark.audit_decode``; this module is what it is handed (``ValueCheck``, plain JSON, no secrets) and
how its answer becomes the ``mismatches`` of the audit's ``sample`` (pure, no JVM).

What is compared, per record:

* a record the decoder accepts must be in the output, and its ``kafka_timestamp``, ``kafka_key``,
  ``kafka_headers`` and every payload column (the table's, and the batch's fields) must equal the decoded
  ones; a column that one side lacks counts as null there;
* a record the decoder rejects must be a dead letter of the pipeline with the same timestamp, key, headers
  and ``value`` bytes (the reason is not compared: a reprocess rewrites it). At offsets that a committed
  ``reprocess`` entry covered it may be in the output instead (re-ingested after a fix); then only its
  timestamp, key and headers are compared;
* the table may hold nothing at the range's coordinates that Kafka does not (a compacted topic shows here).

Each batch decodes with its own format: its frozen Avro schemas from the ledger (``frozen_schemas``), the
output table's column types for the casts (``tidemark.batch.schemas.batch_format`` as under ``schema_changes: lenient``:
a batch already written is compared, not refused), and, for JSON, the ``value_schema`` as configured now
(JSON schemas are not frozen per batch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidemark.batch.plan import BatchPlan
from tidemark.batch.schemas import BatchSchemas, batch_format
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import TidemarkError
from tidemark.formats.record_format import RecordFormat, output_columns
from tidemark.formats.records import BATCH_COLUMNS, DATE_COLUMN, HISTORY_COLUMNS
from tidemark.kafka.offsets import OffsetRange
from tidemark.ledger.state import COMMITTED, KIND_REPROCESS, LedgerRow
from tidemark.storage import ObjectStore

META_COLUMNS = ("kafka_timestamp", "kafka_key", "kafka_headers")
"""Compared for every record, first in each list of compared columns."""
DEAD_LETTER_COMPARED = (*META_COLUMNS, "value")
NOT_PAYLOAD = {"kafka_topic", "kafka_partition", "kafka_offset", *META_COLUMNS, *BATCH_COLUMNS, DATE_COLUMN,
               *HISTORY_COLUMNS}
"""Output columns that are not payload: the coordinates (the join), the metadata (compared apart), and what
the batch adds (its id, the time, the date partition; a history table's interval), which the record did not
carry."""
DETAIL_LIMIT = 10
"""At most this many differing records are described per range (all are counted)."""
OUTPUT, DEAD = "output", "dead letters"


def needs_values(config: PipelineConfig) -> bool:
    """Whether the output keeps typed columns that only the ingest decoder can reproduce."""
    return config.value_format != "raw" or config.key_format == "avro"


def payload_columns(columns: Iterable[str]) -> list[str]:
    """The payload among an output's columns (their order kept)."""
    return [c for c in columns if c not in NOT_PAYLOAD]


@dataclass
class ValueCheck:
    """The sampled ranges handed to Spark: where to read them, and how each batch decodes."""

    pipeline: str
    table_uri: str
    dead_letter_uri: str
    ranges: list[dict]
    """``{topic, partition, start, end, batch_id}``; a range's index in this list identifies it in the answer."""
    formats: dict[str, dict]
    """Batch id (as text) -> its ``RecordFormat`` (as a dict)."""
    reprocessed: list[dict] = field(default_factory=list)
    """``{topic, partition, start, end}`` of committed reprocess entries on the sampled partitions."""
    isolation_level: str = "read_committed"
    kafka_timeout_seconds: int = 30
    max_offsets_per_task: int | None = None
    detail_limit: int = DETAIL_LIMIT
    sample_keys: int = 0
    """A keyed table's check (``tidemark.audit.keyed_sample``): ``ranges`` are every committed offset Kafka still holds,
    reduced to the newest change per key, of which this many keys are compared with the table's rows; 0: the
    sampled ranges are compared record by record."""
    keyed: bool = False
    """A keyed table's check (``sample_keys`` may then be 0: only the deleted keys present are looked for)."""
    seed: int = 0
    """Which keys a keyed check picks (the same seed, the same keys)."""
    table_version: int | None = None
    """The output's version a keyed check compares with (the snapshot whose marker bounded what is read)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ValueCheck:
        return cls(**json.loads(text))

    def format_of(self, batch_id: int) -> RecordFormat:
        return RecordFormat.from_dict(self.formats[str(batch_id)])

    def reads(self) -> list[list[int]]:
        """The ranges grouped into Kafka reads: one batch each, each partition at most once (a Kafka batch
        read takes one range per partition), as lists of range indexes."""
        groups: list[tuple[int, set, list[int]]] = []
        for i, r in enumerate(self.ranges):
            tp = (r["topic"], r["partition"])
            group = next((g for g in groups if g[0] == r["batch_id"] and tp not in g[1]), None)
            if group is None:
                group = (r["batch_id"], set(), [])
                groups.append(group)
            group[1].add(tp)
            group[2].append(i)
        return [indexes for _, _, indexes in groups]

    def read_plan(self, indexes: list[int]) -> BatchPlan:
        """The ranges of one read as a plan (``tidemark.batch.spark.batch_io.kafka_source_options`` reads exactly its
        offsets)."""
        batch_id = self.ranges[indexes[0]]["batch_id"]
        ranges = [OffsetRange(self.ranges[i]["topic"], self.ranges[i]["partition"], self.ranges[i]["start"],
                              self.ranges[i]["end"]) for i in indexes]
        return BatchPlan(self.pipeline, batch_id, self.table_uri, "", ranges, dead_letter_uri=self.dead_letter_uri,
                         kafka_timeout_seconds=self.kafka_timeout_seconds,
                         max_offsets_per_task=self.max_offsets_per_task)

    def compared_columns(self, table_columns: Iterable[str]) -> list[str]:
        """The columns compared for a record in the output: the metadata, then the table's payload columns
        and any field of a sampled batch the table lacks."""
        payload = payload_columns(table_columns)
        for fmt in self.formats.values():
            payload += [c for c in payload_columns(output_columns(RecordFormat.from_dict(fmt))) if c not in payload]
        return [*META_COLUMNS, *payload]


def batch_formats(config: PipelineConfig, ranges: list[LedgerRow], store: ObjectStore | None
                  ) -> tuple[dict[int, RecordFormat], dict[int, str]]:
    """Each batch's format (by batch id), rebuilt from its frozen schemas against the output table as it is
    now (one look at the table per distinct set of frozen schemas); and the batches whose format cannot be
    rebuilt, with why (an Avro batch planned before the pipeline was Avro, say)."""
    lenient = config.model_copy(update={"schema_changes": "lenient"})
    built: dict[str | None, RecordFormat | str] = {}
    formats, refused = {}, {}
    for r in ranges:
        if r.frozen_schemas not in built:
            try:
                frozen = BatchSchemas.from_json(r.frozen_schemas) if r.frozen_schemas else None
                built[r.frozen_schemas] = batch_format(lenient, frozen, store)
            except TidemarkError as exc:
                built[r.frozen_schemas] = exc.detail
        made = built[r.frozen_schemas]
        if isinstance(made, str):
            refused[r.batch_id] = made
        else:
            formats[r.batch_id] = made
    return formats, refused


def build_check(config: PipelineConfig, picked: list[LedgerRow], rows: list[LedgerRow],
                formats: dict[int, RecordFormat]) -> ValueCheck:
    sampled = {r.tp for r in picked}
    reprocessed = [{"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset}
                   for r in rows if r.kind == KIND_REPROCESS and r.status == COMMITTED and r.tp in sampled]
    return ValueCheck(config.name, config.table_uri, config.dead_letter_uri,
                      [{"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset,
                        "batch_id": r.batch_id} for r in picked],
                      {str(b): formats[b].to_dict() for b in sorted({r.batch_id for r in picked})}, reprocessed,
                      config.isolation_level, config.kafka_timeout_seconds, config.max_offsets_per_spark_task)


def mismatches(check: ValueCheck, answer: list[dict]) -> list[dict]:
    """The sampled ranges that differ, from Spark's answer (one entry per range, in ``check.ranges`` order:
    ``kafka_records``, ``table_records``, ``differing``, ``values_differ``, ``differences``)."""
    found = []
    for r, got in zip(check.ranges, answer, strict=True):
        if got["kafka_records"] == got["table_records"] and not got["differing"]:
            continue
        found.append({"topic": r["topic"], "partition": r["partition"], "start": r["start"], "end": r["end"],
                      "batch_id": r["batch_id"], "kafka_records": got["kafka_records"],
                      "table_records": got["table_records"], "checksums_differ": bool(got["differing"]),
                      "values_differ": bool(got["values_differ"]), "differing_records": got["differing"],
                      "differences": got["differences"]})
    return found


def describe(offset: int, kafka: str | None, table: str | None, columns: list[str], reprocessed: bool,
             copies: int = 1) -> dict:
    """One differing record, for people: where Kafka's decoding puts it, where the tables hold it (and how
    often), and (same place) which compared columns differ."""
    if kafka is None:
        why = f"in the {table} but not in Kafka"
    elif table is None:
        why = f"not in the tables (decoded, it belongs in the {kafka})"
    elif copies > 1:
        why = f"held {copies} times in the tables (decoded, it belongs in the {kafka} once)"
    elif kafka != table:
        why = (f"in the {table}, but decoded it belongs in the {kafka}"
               + (" (re-ingested, and its timestamp, key or headers differ)" if reprocessed else ""))
    else:
        why = f"values differ: {', '.join(columns)}"
    return {"offset": offset, "kafka": kafka, "table": table, "columns": columns, "reason": why}
