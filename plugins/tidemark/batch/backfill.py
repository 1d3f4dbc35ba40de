"""Backfills: re-ingest an explicit window of a pipeline's topics into the output, idempotently.

A backfill is a batch of kind ``backfill`` in the same batch sequence and through the same commit
protocol as scheduled batches (frozen ranges, one marked Delta commit, ledger flip), with two
differences: its ranges come from a time window (``offsets_for_times``) or explicit offsets, and it
never moves the committed position. Records already in the output are skipped by their Kafka
coordinates, so backfilling an already-loaded window adds nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tidemark import settings
from tidemark.batch.ownership import RunStateLookup, cli_owner_id
from tidemark.batch.plan import BatchPlan, build_plan
from tidemark.batch.prepare import (
    check_locations,
    freeze,
    freeze_schemas,
    kafka_offsets,
    key_fields_of,
    next_batch_id,
    recover_checked,
    value_fields_of,
)
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import ConfigError, PipelineBusyError
from tidemark.formats.schema_registry import SchemaSource
from tidemark.kafka.client import KafkaOffsets
from tidemark.kafka.offsets import OffsetRange, TopicPartition
from tidemark.kafka.planner import check_topic_ids
from tidemark.ledger.store import Ledger, planned_rows
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackfillRequest:
    """Either a time window ``[start, end)`` or explicit ``[start, end)`` offsets per partition."""

    window: tuple[dt.datetime, dt.datetime] | None = None
    offsets: Mapping[TopicPartition, tuple[int, int]] | None = None
    on_empty_window: Literal["skip", "fail"] = "skip"


def window_ranges(pipeline: str, tps: list[TopicPartition], start_offsets: Mapping[TopicPartition, int | None],
                  end_offsets: Mapping[TopicPartition, int | None], latest: Mapping[TopicPartition, int],
                  on_empty_window: str = "skip") -> list[OffsetRange]:
    """Ranges of a time window from Kafka's offsets_for_times answers at its start and end: a
    partition with no record at or after a bound uses its latest offset for that bound."""
    ranges = []
    for tp in sorted(tps):
        start = start_offsets.get(tp)
        end = end_offsets.get(tp)
        start = latest[tp] if start is None else start
        end = latest[tp] if end is None else end
        if end <= start:
            if on_empty_window == "fail":
                raise ConfigError(f"{tp} has no records in the backfill window; nothing was written "
                                  f"(on_empty_window: fail)", pipeline=pipeline)
            continue
        ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges


def explicit_ranges(pipeline: str, offsets: Mapping[TopicPartition, tuple[int, int]],
                    earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> list[OffsetRange]:
    """Validate explicit per-partition offsets (the ingest form's field ``offsets``) against what Kafka has."""
    ranges = []
    for tp, (start, end) in sorted(offsets.items()):
        if tp not in latest:
            topics = ", ".join(sorted({t.topic for t in latest}))
            raise ConfigError(f"form field 'offsets': {tp} is not a partition of this pipeline's topics ({topics}; "
                              f"partitions 0 to {max(t.partition for t in latest)} at most)", pipeline=pipeline)
        if not 0 <= start <= end:
            raise ConfigError(f"form field 'offsets': {tp}: start {start} must be >= 0 and <= end {end}",
                              pipeline=pipeline)
        if start < earliest[tp] or end > latest[tp]:
            raise ConfigError(f"form field 'offsets': {tp}: [{start}, {end}) is outside the offsets Kafka has "
                              f"[{earliest[tp]}, {latest[tp]}): give a range inside it", pipeline=pipeline)
        if end > start:
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return ranges


def _backfill_ranges(config: PipelineConfig, kafka: KafkaOffsets, request: BackfillRequest) -> list[OffsetRange]:
    """The ranges of a backfill request, from Kafka's offsets."""
    tps = kafka.partitions(config.select_topics(kafka.topic_names()))
    earliest, latest = kafka.earliest(tps), kafka.latest(tps)
    if request.window is not None:
        start, end = request.window
        if end <= start:
            raise ConfigError(f"backfill window end {end.isoformat()} must be after its start "
                              f"{start.isoformat()}", pipeline=config.name)
        return window_ranges(config.name, tps, kafka.offsets_for_time(tps, int(start.timestamp() * 1000)),
                             kafka.offsets_for_time(tps, int(end.timestamp() * 1000)), latest,
                             request.on_empty_window)
    if request.offsets is not None:
        return explicit_ranges(config.name, request.offsets, earliest, latest)
    raise ConfigError("a backfill needs a time window or explicit offsets", pipeline=config.name)


def prepare_backfill(config: PipelineConfig, kafka_properties: Mapping[str, str], request: BackfillRequest, *,
                     owner: str | None = None, ledger_uri: str | None = None, store: ObjectStore | None = None,
                     run_state: RunStateLookup | None = None, schemas: SchemaSource | None = None) -> BatchPlan:
    """Freeze a backfill batch (or re-execute this run's own unfinished one), through the same steps
    as a scheduled batch (``prepare``: locations checked, the pending batch recovered with its topics'
    ids checked, rows frozen with the topics' ids). Refused while another run's batch is pending."""
    owner = owner or cli_owner_id()
    check_locations(config, store)
    ledger = Ledger(ledger_uri or settings.ledger_uri(), store)
    state = ledger.state(config.name)
    if state.pending_batch_id is not None:
        if state.pending_owner != owner:
            raise PipelineBusyError.pending_batch(
                config.name, state.pending_owner, state.pending_batch_id, "planning a backfill, which waits until "
                "that batch is finished: run the pipeline once")
        pending = recover_checked(config, kafka_properties, ledger, state, owner, run_state)
        if pending is not None:
            pending.dedupe = True
            return pending
        state = ledger.state(config.name)
    with kafka_offsets(config, kafka_properties) as kafka:
        ranges = _backfill_ranges(config, kafka, request)
        topic_ids = kafka.topic_ids({r.topic for r in ranges})
        key_fields = key_fields_of(config, kafka, [r for r in ranges if r.size > 0])
        value_fields = value_fields_of(config, kafka, [r for r in ranges if r.size > 0])
    if not ranges:
        log.info("pipeline '%s': the backfill %s holds no records; nothing to do", config.name,
                 "window" if request.window else "offsets' ranges (each empty: start = end)")
        return build_plan(config, ledger.uri, 0, [], owner=owner)
    check_topic_ids(config.name, state.topic_ids, topic_ids, state.positions)
    frozen = freeze_schemas(config, schemas)
    plan = build_plan(config, ledger.uri, next_batch_id(config, ledger, state), ranges, owner=owner, dedupe=True,
                      frozen=frozen, store=store, key_fields=key_fields, value_fields=value_fields)
    what = (f"backfill {request.window[0].isoformat()} .. {request.window[1].isoformat()}" if request.window
            else "backfill of explicit offsets")
    rows = planned_rows(config.name, plan.batch_id, ranges, owner, kind="backfill", reason=what, topic_ids=topic_ids,
                        frozen_schemas=frozen.to_json() if frozen else None, frozen_plan=plan.frozen())
    return freeze(ledger, state, plan, rows, "planning a backfill")
