"""Plan and freeze: recover the pipeline's unfinished batch, or plan the next one from the
ledger's position and Kafka's offsets and freeze it in the ledger (planned rows, appended only if
the pipeline's rows are still as this run read them). Retention gaps skipped under
``on_data_loss: skip`` become committed ``gap`` rows in the same append.

A scheduled batch (``prepare_batch``) and a backfill (``backfill.prepare_backfill``) go through the
same steps, in this order: ``check_locations`` (nothing is frozen for a table that cannot be
written), ``recover_checked`` (the pending batch first, its topics' ids checked), then ``freeze``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import fault_injection, settings, storage
from tidemark.batch.ownership import RunStateLookup, cli_owner_id
from tidemark.batch.plan import BatchPlan, build_plan
from tidemark.batch.recovery import recover
from tidemark.batch.schemas import BatchSchemas, freeze_avro, freeze_json, subject_of
from tidemark.batch.tables import output_txn_version
from tidemark.config.pipeline import PipelineConfig
from tidemark.config.value_settings import schema_in_data
from tidemark.errors import ConfigError, LedgerMissingError
from tidemark.formats import debezium
from tidemark.formats.protobuf_schemas import freeze_protobuf
from tidemark.formats.schema_registry import SchemaSource
from tidemark.kafka.client import KafkaOffsets
from tidemark.kafka.offsets import OffsetRange, TopicPartition, describe_ranges
from tidemark.kafka.planner import check_topic_ids, plan_ranges
from tidemark.ledger.store import Ledger, LedgerRow, LedgerState, gap_rows, planned_rows
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def kafka_offsets(config: PipelineConfig, kafka_properties: Mapping[str, str]) -> KafkaOffsets:
    """Kafka's offsets for this pipeline, under its isolation level and timeout."""
    return KafkaOffsets(kafka_properties, isolation_level=config.isolation_level, pipeline=config.name,
                        timeout_ms=config.kafka_timeout_seconds * 1000)


def check_locations(config: PipelineConfig, store: ObjectStore | None) -> None:
    """Refused before anything is frozen: a Spark log store that is not put-if-absent on S3, and an
    output or dead-letter location that cannot be used (a missing bucket, refused credentials)."""
    tables = [config.table_uri, config.dead_letter_uri]
    storage.check_spark_commits({**storage.spark_conf(None, secrets=False), **config.spark_conf}, tables,
                                f"pipeline '{config.name}'")
    for uri in dict.fromkeys(tables):
        storage.check_location(uri, store, config.name)
    output = storage.open_table(config.table_uri, store)
    existing = [] if output is None else list(output.metadata().partition_columns)
    if output is not None and existing != list(config.partition_by):
        raise ConfigError(f"partition_by is [{', '.join(config.partition_by)}] but the output table "
                          f"{config.table_uri} is partitioned by [{', '.join(existing)}]: Delta cannot change a "
                          f"table's partitioning on append. Set partition_by back to [{', '.join(existing)}], or "
                          f"write to a new table. Nothing was planned", pipeline=config.name)


def recover_checked(config: PipelineConfig, kafka_properties: Mapping[str, str], ledger: Ledger,
                    state: LedgerState, owner: str, run_state: RunStateLookup | None,
                    take_over: str | None = None) -> BatchPlan | None:
    """``recovery.recover``, and for a batch to execute again, a check that its frozen offsets still
    belong to the topics they were planned on (a topic deleted and recreated gets a new id)."""
    pending = recover(config, ledger, state, owner, run_state, take_over)
    if pending is not None and state.topic_ids:
        with kafka_offsets(config, kafka_properties) as kafka:
            current = kafka.topic_ids({r.topic for r in pending.ranges})
        check_topic_ids(config.name, state.topic_ids, current, state.positions, pending_batch=pending.batch_id)
    return pending


def next_batch_id(config: PipelineConfig, ledger: Ledger, state: LedgerState) -> int:
    """The id of the pipeline's next ledger entry: above every id in the ledger and above the output
    table's marker, since Delta silently skips a write whose marker is not above the table's. A
    ledger with no row of a pipeline whose output holds batches is refused (LedgerMissingError)."""
    marker = output_txn_version(config.table_uri, config.name, ledger.store) or 0
    if marker and not state.last_batch_id:
        raise LedgerMissingError(
            f"the output table {config.table_uri} holds batches 1..{marker} of this pipeline (its Delta commits "
            f"carry Tidemark's marker), but the ledger at {ledger.uri} has no row of it: the lake root "
            f"(TIDEMARK_LAKE_ROOT) moved without its ledger, or the ledger was deleted. Starting from "
            f"starting_offsets would ingest every record again, so nothing was frozen. Bring the ledger along: "
            f"tidemark ledger move {config.name} --from <the old ledger's location>; or, to choose a position "
            f"deliberately: tidemark offsets reset {config.name} --to-latest --execute --reason '...'.",
            pipeline=config.name, location=ledger.uri)
    return max(state.last_batch_id, marker) + 1


def freeze(ledger: Ledger, state: LedgerState, plan: BatchPlan, rows: list[LedgerRow], what: str) -> BatchPlan:
    """Append the batch's planned rows (and any gap rows) if the pipeline's rows are still as this run
    read them; another run that got there first makes this one fail, having written nothing."""
    ledger.append(rows, expected=state.fingerprint, what=what)
    log.info("pipeline '%s': %sbatch %d frozen (%d offsets%s): %s", plan.pipeline,
             "backfill " if rows[-1].kind == "backfill" else "", plan.batch_id, plan.total_offsets,
             ", re-reading offsets already ingested: deduplicated" if plan.dedupe else "",
             describe_ranges(plan.ranges))
    fault_injection.crash_point(fault_injection.AFTER_PLAN_FROZEN)
    return plan


def freeze_schemas(config: PipelineConfig, source: SchemaSource | None) -> BatchSchemas | None:
    """The schemas a new batch freezes: for Avro values and keys, their subjects' versions from the
    registry."""
    if not config.uses_registry:
        return None
    if source is None:
        raise ConfigError("values or keys with schemas in a Schema Registry need its connection to plan a batch",
                          pipeline=config.name)
    parts = {}
    if config.value_format == "json":  # uses_registry: a JSON Schema subject
        parts["value"] = freeze_json(config.name, config.value_subject or "", config.value_schema_version, source)
    if config.value_format == "avro":
        parts["value"] = freeze_avro(config.name, subject_of(config.value_subject, config.topics),
                                     config.value_schema_version, source)
    if config.value_format == "protobuf":
        parts["protobuf"] = freeze_protobuf(config.name, subject_of(config.value_subject, config.topics),
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


def key_fields_of(config: PipelineConfig, kafka: KafkaOffsets, ranges: list[OffsetRange]) -> tuple[str, ...] | None:
    """A Debezium table's keys when ``keyed.keys`` is left out and the key is JSON: the fields of the first record's
    Kafka key (None when there is nothing to read, or the keys come from elsewhere). Raises ConfigError naming the
    record when its key is not Debezium's JSON object."""
    if not (config.keyed and not config.keyed.keys and config.key_format != "avro" and ranges):
        return None
    first = ranges[0]
    key = next(kafka.records(first.tp, first.start, first.end)).key
    try:
        return debezium.key_fields(key, f"{first.topic} partition {first.partition} offset {first.start} or after")
    except ValueError as exc:
        raise ConfigError(f"{exc}; name the key columns in keyed.keys", pipeline=config.name) from None


def value_fields_of(config: PipelineConfig, kafka: KafkaOffsets, ranges: list[OffsetRange]):
    """Debezium's JSON events without a ``value_schema``: the row's columns from the JSON converter's schema of the
    newest change in each range (the newest range's first: a column added in the source is in the batch's newest
    events). None when the schema is not in the data. Raises ConfigError naming the record and what to change."""
    if not (schema_in_data(config) and ranges):
        return None
    found = [(r, kafka.newest_value(r.tp, r.start, r.end)) for r in ranges]
    if all(record is None for _, record in found):  # tombstones only: the schema of the change before them
        earliest = kafka.earliest([r.tp for r in ranges])
        found = [(r, kafka.newest_value(r.tp, earliest[r.tp], r.start)) for r in ranges]
    newest = []
    for r, record in found:
        if record is not None:
            where = f"{r.topic} partition {r.partition} offset {record.offset}"
            try:
                newest.append((record.timestamp, debezium.wrapped_row_fields(record.value, where)))
            except ValueError as exc:
                raise ConfigError(str(exc), pipeline=config.name) from None
    if not newest:
        raise ConfigError(f"no change event in {describe_ranges(ranges)} or before it carries the JSON converter's "
                          f"schema to take the columns from: declare value_schema", pipeline=config.name)
    return debezium.merged_fields([fields for _, fields in sorted(newest, key=lambda n: -n[0])])


def _starting_offsets(config: PipelineConfig, kafka: KafkaOffsets, new: list[TopicPartition]):
    """``earliest``/``latest``, or for a start time the first offset at or after it per new
    partition (none that new: the latest offset, so nothing older is read)."""
    when = config.start_time
    if when is None or not new:
        return config.starting_offsets
    found = kafka.offsets_for_time(new, int(when.timestamp() * 1000))
    return {tp: offset for tp, offset in found.items() if offset is not None}


def prepare_batch(config: PipelineConfig, kafka_properties: Mapping[str, str], *, owner: str | None = None,
                  ledger_uri: str | None = None, store: ObjectStore | None = None,
                  run_state: RunStateLookup | None = None, schemas: SchemaSource | None = None,
                  take_over: str | None = None) -> BatchPlan:
    """Recover, then plan and freeze the next batch. An empty plan (batch_id 0 and no ranges)
    means there is nothing new and no Spark job is needed. ``schemas`` (the Schema Registry) is
    asked only for an Avro pipeline with something new to read, after Kafka's offsets are read: a
    record inside the frozen ranges was produced after its schema was registered. ``store``: the
    object store of the pipeline's tables on S3 (None: the local disk). ``take_over``: the reason to
    take the pending batch over from a run that its state says is alive (``tidemark run --take-over``)."""
    owner = owner or cli_owner_id()
    check_locations(config, store)
    ledger = Ledger(ledger_uri or settings.ledger_uri(), store)
    state = ledger.state(config.name)
    pending = recover_checked(config, kafka_properties, ledger, state, owner, run_state, take_over)
    if pending is not None:
        return pending
    if state.pending_batch_id is not None:  # rolled forward: read the state again
        state = ledger.state(config.name)
    first_id = next_batch_id(config, ledger, state)
    with kafka_offsets(config, kafka_properties) as kafka:
        names = kafka.topic_names()
        tps = kafka.partitions(config.select_topics(names))
        if config.topic_pattern and not tps:
            log.warning("pipeline '%s': topic_pattern /%s/ matches none of the cluster's %d topics (a regular "
                        "expression on whole names: 'orders-.*', not 'orders-*'); nothing to read until one does",
                        config.name, config.topic_pattern, len([n for n in names if not n.startswith("__")]))
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
        starting = _starting_offsets(config, kafka, [tp for tp in tps if tp not in state.positions])
        topic_ids = kafka.topic_ids({tp.topic for tp in tps})
        decided = plan_ranges(config.name, state.positions, earliest, latest, starting_offsets=starting,
                              on_data_loss=config.on_data_loss, max_offsets=config.max_offsets_per_run)
        key_fields = key_fields_of(config, kafka, [r for r in decided.ranges if r.size > 0])
        value_fields = value_fields_of(config, kafka, [r for r in decided.ranges if r.size > 0])
    check_topic_ids(config.name, state.topic_ids, topic_ids, state.positions, latest)
    ranges = [r for r in decided.ranges if r.size > 0]
    # on_data_loss: skip: each lost range is a committed 'gap' ledger entry of its own, written in the
    # same compare-and-commit append as the batch's planned rows (or alone when nothing is left to read).
    gaps = gap_rows(config.name, first_id,
                    [OffsetRange(g.tp.topic, g.tp.partition, g.start, g.end) for g in decided.gaps], owner, topic_ids)
    if gaps:
        log.warning("pipeline '%s': DATA LOSS: offsets %s were deleted by retention before they were ingested; "
                    "recorded as gap entry %d (on_data_loss: skip)", config.name,
                    describe_ranges(g.range for g in gaps), gaps[0].batch_id)
    if not ranges:
        if gaps:
            ledger.append(gaps, expected=state.fingerprint, what="recording a retention gap")
        log.info("pipeline '%s': nothing new in %s; no batch planned", config.name, config.topics_label)
        return build_plan(config, ledger.uri, 0, [], owner=owner)
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in ranges)
    frozen = freeze_schemas(config, schemas)
    plan = build_plan(config, ledger.uri, first_id + bool(gaps), ranges, owner=owner, dedupe=dedupe,
                      frozen=frozen, store=store, key_fields=key_fields, value_fields=value_fields)
    rows = planned_rows(config.name, plan.batch_id, ranges, owner, topic_ids=topic_ids,
                        frozen_schemas=frozen.to_json() if frozen else None, frozen_plan=plan.frozen())
    return freeze(ledger, state, plan, gaps + rows, "planning")
