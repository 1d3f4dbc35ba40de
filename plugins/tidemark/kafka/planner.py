"""Range planning: pure decisions on plain values, no I/O.

Given the committed position, Kafka's earliest and latest (last stable) offsets and the
pipeline's policies, decide the frozen ranges of the next batch.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tidemark.errors import DataLossError, OffsetsWentBackwardsError, TopicRecreatedError
from tidemark.kafka.offsets import HasRanges, OffsetRange, TopicPartition


def kafka_topic_id(topic_id: str) -> str:
    """A topic id as Kafka's own tools print it (``kafka-topics --describe``: URL-safe base64 of
    the 16 bytes, no padding) from the UUID form the ledger stores. Other forms pass through."""
    try:
        raw = uuid.UUID(topic_id).bytes
    except ValueError:
        return topic_id
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def check_topic_ids(pipeline: str, known: Mapping[str, str], current: Mapping[str, str],
                    positions: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int] | None = None,
                    pending_batch: int | None = None) -> None:
    """Refuse to read a topic whose id changed since the ledger's rows were written (a topic
    deleted and recreated keeps its name but gets a new id, whatever its offsets look like).
    Topics without an id on either side (older ledgers, older brokers) are not checked."""
    changed = sorted(t for t, old in known.items() if current.get(t) and current[t] != old)
    if not changed:
        return
    topic = changed[0]
    committed = ", ".join(f"{tp}@{off}" for tp, off in sorted(positions.items()) if tp.topic == topic) or "none"
    now = ", ".join(f"{tp}@{off}" for tp, off in sorted((latest or {}).items()) if tp.topic == topic) or "unknown"
    if pending_batch is not None:
        fix = (f"Batch {pending_batch} was frozen against the old topic and cannot be executed: delete its planned "
               f"ledger rows (docs/OPERATIONS.md, 'When Kafka misbehaves'), then move the pipeline onto the new "
               f"topic with")
    else:
        fix = "After checking what happened to the topic, move the pipeline onto the new topic with"
    others = f" Also recreated: {', '.join(changed[1:])}." if len(changed) > 1 else ""
    raise TopicRecreatedError(
        f"topic '{topic}' was deleted and recreated: Kafka's topic id is now {kafka_topic_id(current[topic])} "
        f"(as `kafka-topics --describe` prints it), but the ledger's offsets (committed: {committed}) belong to "
        f"topic id {kafka_topic_id(known[topic])}; Kafka's latest offsets now: {now}. "
        f"Offsets of the new topic number other records, so nothing was read or written. {fix} "
        f"'tidemark offsets reset {pipeline} --topic {topic} --to-earliest --execute --reason \"topic recreated\"' "
        f"(or --to-latest to skip what the new topic already holds); the reset records the new topic id.{others}",
        pipeline=pipeline)


@dataclass(frozen=True)
class Gap:
    """Offsets that retention deleted before they were read (recorded under ``on_data_loss: skip``)."""

    tp: TopicPartition
    start: int
    end: int


@dataclass
class RangeDecision(HasRanges):
    """The outcome of range planning: the ranges to read, and the gaps the skip policy recorded.
    Not yet a batch: ``batch.prepare`` turns it into a frozen ``BatchPlan``."""

    ranges: list[OffsetRange] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


def start_offset(
    tp: TopicPartition,
    committed: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    starting_offsets: Literal["earliest", "latest"] | Mapping[TopicPartition, int],
) -> int:
    """Where this run starts reading ``tp``: its committed offset, or the configured start
    position for a partition never committed (``earliest``, ``latest``, or per-partition offsets
    resolved from a start time, clamped to what Kafka has)."""
    if tp in committed:
        return committed[tp]
    if isinstance(starting_offsets, Mapping):
        return min(max(starting_offsets.get(tp, latest[tp]), earliest[tp]), latest[tp])
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
    starting_offsets: Literal["earliest", "latest"] | Mapping[TopicPartition, int] = "earliest",
    on_data_loss: Literal["fail", "skip"] = "fail",
    max_offsets: int | None = None,
) -> RangeDecision:
    """Plan the next batch over the partitions in ``latest`` (the partitions Kafka has now)."""
    plan = RangeDecision()
    starts: dict[TopicPartition, int] = {}
    lost: list[str] = []
    for tp in sorted(latest):
        start = start_offset(tp, committed, earliest, latest, starting_offsets)
        if start > latest[tp]:
            raise OffsetsWentBackwardsError(
                f"{tp}: committed offset {start} is beyond Kafka's latest offset {latest[tp]}; the topic "
                f"was probably deleted and recreated (or truncated). Nothing was read or written. After checking "
                f"what happened to the topic, reset the partition with 'tidemark offsets reset {pipeline} --topic "
                f"{tp} --to-earliest --execute --reason \"...\"'.",
                pipeline=pipeline,
            )
        if start < earliest[tp]:
            lost.append(f"{tp} [{start}, {earliest[tp]})")
            plan.gaps.append(Gap(tp, start, earliest[tp]))
            start = earliest[tp]
        starts[tp] = start
    if lost and on_data_loss == "fail":
        scope = " ".join(f"--topic {g.tp}" for g in plan.gaps)
        raise DataLossError(
            f"offsets {', '.join(lost)} were deleted by retention before they were ingested "
            f"({sum(g.end - g.start for g in plan.gaps)} offsets lost). Nothing was read or written. Either replay "
            f"from what is left ('tidemark offsets reset {pipeline} {scope} --to-earliest --execute --reason "
            f"\"...\"': an audited reset row) or set 'on_data_loss: skip' in the pipeline file to record each "
            f"lost range as a 'gap' row in the ledger and continue from the earliest offset Kafka has.",
            pipeline=pipeline,
        )
    granted = share_cap({tp: latest[tp] - s for tp, s in starts.items()}, max_offsets)
    plan.ranges = [OffsetRange(tp.topic, tp.partition, s, s + granted[tp]) for tp, s in starts.items()]
    return plan
