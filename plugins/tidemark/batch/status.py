"""What a pipeline looks like now: committed offsets against Kafka's latest (lag), the copy of the
committed positions in the pipeline's Kafka consumer group for standard lag tools, and what one
committed batch put in the output (``batch_summary``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from tidemark import settings, storage
from tidemark.batch.plan import METADATA_KEY, BatchPlan
from tidemark.config import PipelineConfig
from tidemark.errors import PlanMismatchError
from tidemark.kafka_client import KafkaOffsets, commit_group_offsets
from tidemark.ledger import COMMITTED, WRITING_KINDS, Ledger

log = logging.getLogger(__name__)


def partition_status(config: PipelineConfig, kafka_properties: Mapping[str, str],
                     ledger_uri: str | None = None) -> list[dict]:
    """Per partition: committed offset, Kafka's latest offset, lag and the last committed batch
    (the ``tidemark offsets show --json`` contract). A partition never committed has
    ``committed_offset`` null and its lag counted from the earliest offset Kafka has."""
    state = Ledger(ledger_uri or settings.ledger_uri()).state(config.name)
    with KafkaOffsets(kafka_properties, isolation_level=config.isolation_level, pipeline=config.name,
                      timeout_ms=config.kafka_timeout_seconds * 1000) as kafka:
        tps = kafka.partitions(config.select_topics(kafka.topic_names()))
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


def mirror_to_consumer_group(config: PipelineConfig, kafka_properties: Mapping[str, str],
                             ledger_uri: str | None = None) -> bool:
    """Copy the ledger's committed positions to the Kafka consumer group named after the pipeline
    (metadata: the batch id), for standard lag tools. The ledger stays the source of truth: a
    failure is logged and the next run mirrors again; it never fails a committed batch."""
    if not config.mirror_consumer_group:
        return False
    state = Ledger(ledger_uri or settings.ledger_uri()).state(config.name)
    if not state.positions:
        return False
    metadata = {tp: f"tidemark batch {batch}" for tp, batch in state.last_batch.items()}
    try:
        commit_group_offsets(kafka_properties, config.name, state.positions, metadata,
                             timeout_ms=config.kafka_timeout_seconds * 1000)
    except Exception as exc:
        log.warning("pipeline '%s': could not mirror offsets to consumer group '%s' (%s: %s); the ledger is "
                    "unaffected and the next run tries again", config.name, config.name, type(exc).__name__, exc)
        return False
    log.info("pipeline '%s': offsets mirrored to consumer group '%s'", config.name, config.name)
    return True


def output_version(table_uri: str, pipeline: str, batch_id: int, depth: int = 100) -> int | None:
    """The output table's Delta version whose commit holds the batch (its ``userMetadata`` names the
    pipeline and batch id, ``BatchPlan.commit_metadata``); None if none of the last ``depth`` commits
    does (a batch that found every record already in the output commits nothing new)."""
    table = storage.open_table(table_uri)
    if table is None:
        return None
    for commit in table.history(depth):
        try:
            held = json.loads(commit.get("userMetadata") or "{}").get(METADATA_KEY) or {}
        except (ValueError, AttributeError):
            continue
        if held.get("pipeline") == pipeline and held.get("batch_id") == batch_id:
            return commit.get("version")
    return None


def batch_summary(plan: BatchPlan) -> dict:
    """What a committed batch put in the output, from the ledger (the counts the commit recorded) and
    the output table (its Delta version): the extra of the Airflow asset event of the output table.
    Raises PlanMismatchError when the ledger does not hold the batch as committed."""
    rows = [r for r in Ledger(plan.ledger_uri).rows(plan.pipeline)
            if r.batch_id == plan.batch_id and r.kind in WRITING_KINDS]
    if not rows or any(r.status != COMMITTED for r in rows):
        raise PlanMismatchError(f"batch {plan.batch_id} is not committed in the ledger ({plan.ledger_uri}); no summary "
                          f"of it can be given", pipeline=plan.pipeline)
    ranges = [{"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset,
               "records": (r.record_count or 0) - (r.dead_letter_count or 0), "dead_letters": r.dead_letter_count or 0}
              for r in sorted(rows, key=lambda r: (r.topic, r.partition))]
    return {"pipeline": plan.pipeline, "batch_id": plan.batch_id, "kind": rows[0].kind, "table": plan.table_uri,
            "ranges": ranges, "records": sum(r["records"] for r in ranges),
            "dead_letters": sum(r["dead_letters"] for r in ranges),
            "delta_version": output_version(plan.table_uri, plan.pipeline, plan.batch_id)}
