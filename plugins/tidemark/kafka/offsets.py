"""Offset ranges and their Spark form.

Convention: a range is ``[start, end)``. ``end`` is exclusive: the next offset to read, which is
Kafka's own meaning of a committed offset. A partition's committed position is the ``end`` of its
last committed range.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A Kafka topic-partition as a plain, hashable value."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self.topic}:{self.partition} [{self.start}, {self.end})")

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition} [{self.start}, {self.end})"

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """Offsets spanned. Not the record count: transaction markers and compaction leave gaps."""
        return self.end - self.start

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> OffsetRange:
        return cls(str(data["topic"]), int(data["partition"]), int(data["start"]), int(data["end"]))


class HasRanges:
    """What a set of ranges says as a whole (mixed into ``RangeDecision`` and ``BatchPlan``)."""

    ranges: list[OffsetRange]

    @property
    def is_empty(self) -> bool:
        return all(r.size == 0 for r in self.ranges)

    @property
    def total_offsets(self) -> int:
        """Offsets spanned (not records: transaction markers and compaction leave gaps)."""
        return sum(r.size for r in self.ranges)


def describe_ranges(ranges) -> str:
    """Ranges as messages and logs show them: ``orders:0 [0, 5), orders:1 [3, 9)``."""
    return ", ".join(str(r) for r in ranges)


def spark_kafka_options(ranges: list[OffsetRange]) -> dict[str, str]:
    """Spark Kafka source options that read exactly ``ranges``: ``assign`` names the partitions,
    ``startingOffsets`` / ``endingOffsets`` the frozen numbers. Empty ranges are left out."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in sorted(ranges):
        if r.size == 0:
            continue
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    if not assign:
        raise ValueError("no non-empty range to read")
    return {
        "assign": json.dumps(assign, sort_keys=True),
        "startingOffsets": json.dumps(starting, sort_keys=True),
        "endingOffsets": json.dumps(ending, sort_keys=True),
    }


def spark_min_partitions(ranges: list[OffsetRange], max_per_task: int | None) -> int | None:
    """The Kafka source's ``minPartitions`` that splits every range longer than ``max_per_task`` into
    pieces of at most about that size (Spark splits ranges in proportion to their size once
    ``minPartitions`` exceeds their number), or None when no range is that long: one task per
    partition, as Spark reads by default. Splitting changes which task reads an offset, never which
    offsets are read."""
    sizes = [r.size for r in ranges if r.size > 0]
    if not max_per_task or not sizes or max(sizes) <= max_per_task:
        return None
    return sum(-(-size // max_per_task) for size in sizes)
