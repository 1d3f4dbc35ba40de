"""One run of a pipeline, as the Airflow tasks and the CLI drive it: recover, plan, freeze."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import settings
from tidemark.commit import BatchPlan, decide_recovery, finalize_batch, output_txn_version
from tidemark.config import PipelineConfig
from tidemark.kafka_client import KafkaOffsets
from tidemark.ledger import Ledger, planned_rows
from tidemark.planner import plan_ranges

log = logging.getLogger(__name__)


def recover(config: PipelineConfig, ledger: Ledger) -> BatchPlan | None:
    """Finish an unfinished batch first. Returns the batch to execute again (same frozen ranges),
    or None when there is nothing to re-execute (after rolling a committed batch forward)."""
    state, _ = ledger.state(config.name)
    marker = output_txn_version(config.table_uri, config.name) if state.pending_batch_id else None
    action = decide_recovery(state.pending_batch_id, marker)
    if action == "none":
        return None
    plan = BatchPlan(config.name, state.pending_batch_id, config.table_uri, ledger.uri,
                     state.pending_ranges, recovered=True)
    if action == "roll_forward":
        log.warning("pipeline '%s': batch %d is in the output table but not yet in the ledger; "
                    "rolling it forward", config.name, plan.batch_id)
        finalize_batch(plan)
        return None
    log.warning("pipeline '%s': batch %d was planned but never committed; executing it again with "
                "the same frozen ranges (%d offsets)", config.name, plan.batch_id, plan.total_offsets)
    return plan


def prepare_batch(config: PipelineConfig, kafka_properties: Mapping[str, str], *,
                  dag_run_id: str | None = None, ledger_uri: str | None = None) -> BatchPlan:
    """Recover, then plan and freeze the next batch. An empty plan (batch_id 0 and no ranges)
    means there is nothing new and no Spark job is needed."""
    ledger = Ledger(ledger_uri or settings.ledger_uri())
    pending = recover(config, ledger)
    if pending is not None:
        return pending
    state, version = ledger.state(config.name)
    with KafkaOffsets(kafka_properties, isolation_level=config.isolation_level,
                      pipeline=config.name) as kafka:
        tps = kafka.partitions(config.topics)
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
    decided = plan_ranges(config.name, state.positions, earliest, latest,
                          starting_offsets=config.starting_offsets, on_data_loss=config.on_data_loss,
                          max_records=config.max_records_per_run)
    ranges = [r for r in decided.ranges if r.size > 0]
    if not ranges:
        log.info("pipeline '%s': nothing new in %s; no batch planned", config.name, ", ".join(config.topics))
        return BatchPlan(config.name, 0, config.table_uri, ledger.uri, [])
    batch_id = state.last_batch_id + 1
    ledger.append(planned_rows(config.name, batch_id, ranges, dag_run_id), read_version=version)
    plan = BatchPlan(config.name, batch_id, config.table_uri, ledger.uri, ranges)
    log.info("pipeline '%s': batch %d frozen: %s", config.name, batch_id,
             ", ".join(f"{r.tp} [{r.start}, {r.end})" for r in ranges))
    return plan


def partition_status(config: PipelineConfig, kafka_properties: Mapping[str, str],
                     ledger_uri: str | None = None) -> list[dict]:
    """Per partition: committed offset, Kafka's latest offset, lag and the last committed batch
    (the ``tidemark offsets show --json`` contract). A partition never committed has
    ``committed_offset`` null and its lag counted from the earliest offset Kafka has."""
    state, _ = Ledger(ledger_uri or settings.ledger_uri()).state(config.name)
    with KafkaOffsets(kafka_properties, isolation_level=config.isolation_level,
                      pipeline=config.name) as kafka:
        tps = kafka.partitions(config.topics)
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
    rows = []
    for tp in sorted(set(tps) | set(state.positions)):
        committed = state.positions.get(tp)
        end = latest.get(tp)
        base = committed if committed is not None else earliest.get(tp)
        rows.append({
            "topic": tp.topic,
            "partition": tp.partition,
            "committed_offset": committed,
            "latest_offset": end,
            "lag": None if end is None or base is None else max(end - base, 0),
            "last_batch_id": state.last_batch.get(tp),
        })
    return rows
