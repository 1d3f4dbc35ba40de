"""Plan and freeze: recover the pipeline's unfinished batch, or plan the next one from the
ledger's position and Kafka's offsets and freeze it in the ledger (planned rows, appended only if
the pipeline's rows are still as this run read them). Retention gaps skipped under
``on_data_loss: skip`` become committed ``gap`` rows in the same append.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import crash, settings, storage
from tidemark.batch.ownership import RunStateLookup, cli_owner_id
from tidemark.batch.plan import BatchPlan
from tidemark.batch.recovery import describe_ranges, plan_for, recover
from tidemark.config import PipelineConfig
from tidemark.errors import ConfigError
from tidemark.kafka_client import KafkaOffsets
from tidemark.ledger import Ledger, gap_rows, planned_rows
from tidemark.offsets import OffsetRange, TopicPartition
from tidemark.planner import check_topic_ids, plan_ranges
from tidemark.schema_registry import SchemaSource
from tidemark.schemas import BatchSchemas, freeze_avro, subject_of

log = logging.getLogger(__name__)


def _starting_offsets(config: PipelineConfig, kafka: KafkaOffsets, new: list[TopicPartition]):
    """``earliest``/``latest``, or for a start time the first offset at or after it per new
    partition (none that new: the latest offset, so nothing older is read)."""
    when = config.start_time
    if when is None or not new:
        return config.starting_offsets
    found = kafka.offsets_for_time(new, int(when.timestamp() * 1000))
    return {tp: offset for tp, offset in found.items() if offset is not None}


def freeze_schemas(config: PipelineConfig, source: SchemaSource | None) -> BatchSchemas | None:
    """The schemas a new batch freezes: for Avro values and keys, their subjects' versions from the
    registry."""
    if config.value_format != "avro" and config.key_format != "avro":
        return None
    if source is None:
        raise ConfigError("Avro values or keys need a Schema Registry connection to plan a batch",
                          pipeline=config.name)
    parts = {}
    if config.value_format == "avro":
        parts["value"] = freeze_avro(config.name, subject_of(config.value_subject, config.topics),
                                     config.value_schema_version, source)
    if config.key_format == "avro":
        parts["key"] = freeze_avro(config.name, subject_of(config.key_subject, config.topics, "key"), None, source,
                                   part="key")
    for part, frozen in parts.items():
        log.info("pipeline '%s': %s reader schema: subject '%s' version %d (id %d); writer schema ids %s%s",
                 config.name, part, frozen.subject, frozen.reader_version, frozen.reader_id,
                 sorted(frozen.writers, key=int),
                 f"; unreadable ids {sorted(frozen.unreadable, key=int)}" if frozen.unreadable else "")
    return BatchSchemas(**parts)


def prepare_batch(config: PipelineConfig, kafka_properties: Mapping[str, str], *, run_id: str | None = None,
                  ledger_uri: str | None = None, run_state: RunStateLookup | None = None,
                  schemas: SchemaSource | None = None) -> BatchPlan:
    """Recover, then plan and freeze the next batch. An empty plan (batch_id 0 and no ranges)
    means there is nothing new and no Spark job is needed. ``schemas`` (the Schema Registry) is
    asked only for an Avro pipeline with something new to read, after Kafka's offsets are read: a
    record inside the frozen ranges was produced after its schema was registered."""
    run_id = run_id or cli_owner_id()
    # Refused before anything is frozen: a Spark log store that is not put-if-absent on S3.
    storage.check_spark_commits({**storage.spark_conf(None, secrets=False), **config.spark_conf},
                                [config.table_uri, config.dead_letter_uri], f"pipeline '{config.name}'")
    ledger = Ledger(ledger_uri or settings.ledger_uri())
    state = ledger.state(config.name)
    pending = recover(config, ledger, state, run_id, run_state)
    if pending is not None:
        if state.topic_ids:  # the frozen offsets must still be those of the topic they were planned on
            with KafkaOffsets(kafka_properties, isolation_level=config.isolation_level, pipeline=config.name,
                              timeout_ms=config.kafka_timeout_seconds * 1000) as kafka:
                current = kafka.topic_ids({r.topic for r in pending.ranges})
            check_topic_ids(config.name, state.topic_ids, current, state.positions, pending_batch=pending.batch_id)
        return pending
    if state.pending_batch_id is not None:  # rolled forward: read the state again
        state = ledger.state(config.name)
    with KafkaOffsets(kafka_properties, isolation_level=config.isolation_level, pipeline=config.name,
                      timeout_ms=config.kafka_timeout_seconds * 1000) as kafka:
        tps = kafka.partitions(config.select_topics(kafka.topic_names()))
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
        starting = _starting_offsets(config, kafka, [tp for tp in tps if tp not in state.positions])
        topic_ids = kafka.topic_ids({tp.topic for tp in tps})
    check_topic_ids(config.name, state.topic_ids, topic_ids, state.positions, latest)
    decided = plan_ranges(config.name, state.positions, earliest, latest, starting_offsets=starting,
                          on_data_loss=config.on_data_loss, max_offsets=config.max_offsets_per_run)
    ranges = [r for r in decided.ranges if r.size > 0]
    # on_data_loss: skip: each lost range is a committed 'gap' ledger entry of its own, written in the
    # same compare-and-commit append as the batch's planned rows (or alone when nothing is left to read).
    gaps = gap_rows(config.name, state.last_batch_id + 1,
                    [OffsetRange(g.tp.topic, g.tp.partition, g.start, g.end) for g in decided.gaps], run_id, topic_ids)
    if gaps:
        log.warning("pipeline '%s': DATA LOSS: offsets %s were deleted by retention before they were ingested; "
                    "recorded as gap entry %d (on_data_loss: skip)", config.name,
                    ", ".join(f"{g.tp} [{g.start_offset}, {g.end_offset})" for g in gaps), gaps[0].batch_id)
    if not ranges:
        if gaps:
            ledger.append(gaps, expected=state.fingerprint, what="recording a retention gap")
        log.info("pipeline '%s': nothing new in %s; no batch planned", config.name, config.topics_label)
        return plan_for(config, ledger, 0, [], run_id=run_id)
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in ranges)
    frozen = freeze_schemas(config, schemas)
    plan = plan_for(config, ledger, state.last_batch_id + 1 + bool(gaps), ranges, run_id=run_id, dedupe=dedupe,
                    frozen=frozen)
    ledger.append(gaps + planned_rows(config.name, plan.batch_id, ranges, run_id, topic_ids=topic_ids,
                                      frozen_schemas=frozen.to_json() if frozen else None),
                  expected=state.fingerprint)
    log.info("pipeline '%s': batch %d frozen (%d offsets%s): %s", config.name, plan.batch_id, plan.total_offsets,
             ", re-reading offsets already ingested: deduplicated" if dedupe else "", describe_ranges(plan))
    crash.crash_point(crash.AFTER_PLAN_FROZEN)
    return plan
