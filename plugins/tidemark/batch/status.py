"""What a pipeline looks like now: committed offsets against Kafka's latest (lag), and the copy
of the committed positions in the pipeline's Kafka consumer group for standard lag tools."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import settings
from tidemark.config import PipelineConfig
from tidemark.kafka_client import KafkaOffsets, commit_group_offsets
from tidemark.ledger import Ledger

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
