"""The copy of a pipeline's committed positions in its Kafka consumer group (named after the pipeline),
for standard lag tools (``kafka-consumer-groups --describe``, Burrow). The ledger stays the source of
truth; this is the one place Tidemark writes to Kafka."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tidemark import settings
from tidemark.config.pipeline import PipelineConfig
from tidemark.kafka.client import commit_group_offsets
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


def mirror_to_consumer_group(config: PipelineConfig, kafka_properties: Mapping[str, str],
                             ledger_uri: str | None = None, *, store: ObjectStore | None = None) -> bool:
    """Copy the ledger's committed positions to the Kafka consumer group named after the pipeline
    (metadata: the batch id), for standard lag tools. The ledger stays the source of truth: a
    failure is logged and the next run mirrors again; it never fails a committed batch."""
    if not config.mirror_consumer_group:
        return False
    state = Ledger(ledger_uri or settings.ledger_uri(), store).state(config.name)
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
