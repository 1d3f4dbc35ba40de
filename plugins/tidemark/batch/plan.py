"""The frozen batch: one type from the plan step to the ledger commit.

A ``BatchPlan`` is what the plan step freezes in the ledger and hands to the ingest job as small
JSON (no secrets in it). Every later step, and every retry, executes exactly its ranges.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidemark.batch.schemas import BatchSchemas, batch_format
from tidemark.formats.record_format import RecordFormat
from tidemark.kafka.offsets import HasRanges, OffsetRange

if TYPE_CHECKING:
    from tidemark.config.pipeline import PipelineConfig

METADATA_KEY = "tidemark"


@dataclass
class BatchPlan(HasRanges):
    """A frozen batch, as handed from the plan task to the ingest job (no secrets in it)."""

    pipeline: str
    batch_id: int
    table_uri: str
    ledger_uri: str
    ranges: list[OffsetRange] = field(default_factory=list)
    recovered: bool = False
    owner: str | None = None
    """The run that owns (froze or took over) the batch; only it may execute the batch (the ledger's
    ``dag_run_id`` column)."""
    dead_letter_uri: str | None = None
    dedupe: bool = False
    """Some ranges may already be in the output (after a reset back in time, or a backfill):
    records whose Kafka coordinates are already in the output or dead letters are skipped."""
    record_format: RecordFormat = field(default_factory=RecordFormat)
    """How values are parsed, what makes a record bad, and a keyed table's keys (typed; JSON only at the edges)."""
    partition_by: list[str] = field(default_factory=list)
    """The output table's partition columns."""
    kafka_timeout_seconds: int = 30
    """How long the Spark read waits for Kafka before the batch fails (nothing committed)."""
    max_offsets_per_task: int | None = None
    """Ranges longer than this are split over several Spark tasks (``tidemark.kafka.offsets.spark_min_partitions``);
    None (the default, and plans frozen before 0.3) reads one task per partition."""
    isolation_level: str = "read_committed"
    """How the job reads the ranges (the pipeline's ``isolation_level`` when the batch was planned): a batch
    executed again after the pipeline file changed reads as planned, so aborted records never enter a batch
    that was planned without them."""

    FROZEN = ("record_format", "partition_by", "isolation_level")
    """What shapes a batch's output, kept in the ledger with its planned rows (``frozen_plan``): recovery
    executes a pending batch with them, whatever the pipeline file says by then (``recovery.pending_plan``).
    The rest of a plan is where to write (the configured locations) and how long to wait."""

    def frozen(self) -> str:
        """The plan's ``FROZEN`` settings as JSON: the ledger's ``frozen_plan``."""
        return json.dumps({name: self._json_value(name) for name in self.FROZEN}, sort_keys=True)

    def _json_value(self, name: str):
        value = getattr(self, name)
        return value.to_dict() if isinstance(value, RecordFormat) else value

    def with_frozen(self, text: str) -> BatchPlan:
        """This plan with the settings a ledger row's ``frozen_plan`` holds (a pending batch's, as planned)."""
        held = json.loads(text)
        if "record_format" in held:
            held["record_format"] = RecordFormat.from_dict(held["record_format"])
        return dataclasses.replace(self, **{name: held[name] for name in self.FROZEN if name in held})

    @property
    def format(self) -> RecordFormat:
        return self.record_format

    def to_json(self) -> str:
        data = dict(self.__dict__, ranges=[r.to_dict() for r in self.ranges],
                    record_format=self.record_format.to_dict())
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BatchPlan:
        data = json.loads(text)
        data["ranges"] = [OffsetRange.from_dict(r) for r in data["ranges"]]
        data["record_format"] = RecordFormat.from_dict(data["record_format"]) if data.get("record_format") \
            else RecordFormat()
        if "run_id" in data:  # a plan frozen by release 0.2, still in flight after an upgrade
            data["owner"] = data.pop("run_id")
        return cls(**data)

    def commit_metadata(self, records: dict | None = None, filtered: dict | None = None) -> str:
        """The ``userMetadata`` of the output commit: which batch and ranges it holds; for a keyed table's
        MERGE, and a transform's append, also the good records it applied per partition (``records``), which no
        row count shows; for a keyed table's transform, the upserts it filtered out (``filtered``)."""
        held = {"pipeline": self.pipeline, "batch_id": self.batch_id, "ranges": [r.to_dict() for r in self.ranges]}
        for name, counts in (("records", records), ("filtered", filtered)):
            if counts is not None:
                held[name] = {f"{tp.topic}:{tp.partition}": n for tp, n in counts.items()}
        return json.dumps({METADATA_KEY: held}, sort_keys=True)


def build_plan(config: PipelineConfig, ledger_uri: str, batch_id: int, ranges, *,
               frozen: BatchSchemas | None = None, store=None, key_fields: tuple[str, ...] | None = None,
               value_fields=None, **extra) -> BatchPlan:
    """A BatchPlan with everything the ingest job needs from the pipeline config, and for a batch
    with offsets to read, the record format checked against the output table (``schemas``; ``store``
    is the object store of a table on S3; ``key_fields``, ``value_fields``: a Debezium table's keys and columns
    read from its records)."""
    ranges = list(ranges)
    fmt = (batch_format(config, frozen, store, key_fields, value_fields) if any(r.size for r in ranges)
           else config.record_format)
    return BatchPlan(config.name, batch_id, config.table_uri, ledger_uri, ranges,
                     dead_letter_uri=config.dead_letter_uri, record_format=fmt,
                     partition_by=list(config.partition_by), kafka_timeout_seconds=config.kafka_timeout_seconds,
                     max_offsets_per_task=config.max_offsets_per_spark_task,
                     isolation_level=config.isolation_level, **extra)
