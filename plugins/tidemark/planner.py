"""Range planning: pure decisions on plain values, no I/O.

Given the committed position, Kafka's earliest and latest (last stable) offsets and the
pipeline's policies, decide the frozen ranges of the next batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tidemark.errors import TidemarkError
from tidemark.offsets import OffsetRange, TopicPartition


class DataLossError(TidemarkError):
    """The committed offset is below the earliest offset Kafka still has (retention deleted it)."""


class OffsetsWentBackwardsError(TidemarkError):
    """Kafka's latest offset is below the committed one: the topic was deleted and recreated,
    or truncated. Terminal: an audited reset is the way out."""


@dataclass(frozen=True)
class Gap:
    """Offsets that retention deleted before they were read (recorded under ``on_data_loss: skip``)."""

    tp: TopicPartition
    start: int
    end: int


@dataclass
class Plan:
    """The outcome of planning: the ranges to read, and the gaps the skip policy recorded."""

    ranges: list[OffsetRange] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return all(r.size == 0 for r in self.ranges)

    @property
    def total_offsets(self) -> int:
        return sum(r.size for r in self.ranges)


def start_offset(
    tp: TopicPartition,
    committed: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    starting_offsets: Literal["earliest", "latest"],
) -> int:
    """Where this run starts reading ``tp``: its committed offset, or the configured start
    position for a partition never committed."""
    if tp in committed:
        return committed[tp]
    return earliest[tp] if starting_offsets == "earliest" else latest[tp]


def share_cap(backlogs: dict[TopicPartition, int], cap: int | None) -> dict[TopicPartition, int]:
    """Split ``cap`` offsets across partitions max-min fairly: smallest backlogs first, each
    partition gets at most an equal share of what is left, so what a small partition does not
    need goes to the busy ones. The grants total ``min(cap, sum of backlogs)``."""
    if cap is None:
        return dict(backlogs)
    granted = {tp: 0 for tp in backlogs}
    remaining = cap
    waiting = sorted((b, tp) for tp, b in backlogs.items() if b > 0)
    for i, (backlog, tp) in enumerate(waiting):
        granted[tp] = min(backlog, remaining // (len(waiting) - i))
        remaining -= granted[tp]
    return granted


def plan_ranges(
    pipeline: str,
    committed: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    *,
    starting_offsets: Literal["earliest", "latest"] = "earliest",
    on_data_loss: Literal["fail", "skip"] = "fail",
    max_records: int | None = None,
) -> Plan:
    """Plan the next batch over the partitions in ``latest`` (the partitions Kafka has now)."""
    plan = Plan()
    starts: dict[TopicPartition, int] = {}
    for tp in sorted(latest):
        start = start_offset(tp, committed, earliest, latest, starting_offsets)
        if start > latest[tp]:
            raise OffsetsWentBackwardsError(
                f"{tp}: committed offset {start} is beyond Kafka's latest offset {latest[tp]}; the topic "
                f"was probably deleted and recreated. Nothing was read. Reset the partition with "
                f"'tidemark offsets reset {pipeline} --topic {tp} --to-earliest --execute' after checking.",
                pipeline=pipeline,
            )
        if start < earliest[tp]:
            if on_data_loss == "fail":
                raise DataLossError(
                    f"{tp}: offsets [{start}, {earliest[tp]}) were deleted by retention before they were "
                    f"ingested. Nothing was read. Either replay from what is left "
                    f"('tidemark offsets reset {pipeline} --topic {tp} --to-earliest --execute') or set "
                    f"'on_data_loss: skip' to record the gap and continue.",
                    pipeline=pipeline,
                )
            plan.gaps.append(Gap(tp, start, earliest[tp]))
            start = earliest[tp]
        starts[tp] = start
    granted = share_cap({tp: latest[tp] - s for tp, s in starts.items()}, max_records)
    plan.ranges = [OffsetRange(tp.topic, tp.partition, s, s + granted[tp]) for tp, s in starts.items()]
    return plan
