"""The frozen batch: one type from the plan step to the ledger commit.

A ``BatchPlan`` is what the plan step freezes in the ledger and hands to the ingest job as small
JSON (no secrets in it). Every later step, and every retry, executes exactly its ranges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tidemark.offsets import OffsetRange
from tidemark.records import RecordFormat

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
    max_offsets_per_task: int | None = None
    """Ranges longer than this are split over several Spark tasks (``offsets.spark_min_partitions``);
    None (the default, and plans frozen before 0.3) reads one task per partition."""

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
