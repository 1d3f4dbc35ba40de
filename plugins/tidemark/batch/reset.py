"""Offset replay: move a pipeline's committed position, dry run by default, audited when executed.

An executed reset appends one committed ``reset`` row per partition to the ledger (old position in
``start_offset``, new in ``end_offset``, the reason, who or which DAG run); the next ingest run
starts from the new position. Re-read offsets are deduplicated on the Kafka coordinates when
written (see docs/OPERATIONS.md).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tidemark import settings
from tidemark.batch.prepare import kafka_offsets
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import PipelineBusyError, ResetError
from tidemark.kafka.reset_targets import ResetPreview, parse_datetime, parse_duration, parse_offsets_file, parse_scope
from tidemark.kafka.reset_targets import preview_reset as decide
from tidemark.ledger.store import COMMITTED, Ledger, LedgerRow, now
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResetRequest:
    """What the user asked for (CLI flags or the replay DAG's form)."""

    scenario: str
    scopes: tuple[str, ...] = ()
    offset: int | None = None
    shift: int | None = None
    datetime: str | None = None
    duration: str | None = None
    offsets_file: str | None = None
    execute: bool = False
    reason: str | None = None
    owner: str | None = None
    """Who applied the reset (a replay DAG run, or the CLI's user@host): the ledger's dag_run_id."""


@dataclass
class ResetOutcome:
    preview: ResetPreview
    executed: bool
    batch_id: int | None = None


def reset_offsets(config: PipelineConfig, kafka_properties: Mapping[str, str], request: ResetRequest, *,
                  ledger_uri: str | None = None, store: ObjectStore | None = None,
                  clock: dt.datetime | None = None) -> ResetOutcome:
    """Plan a reset (and apply it when ``request.execute``). Refused while a batch is pending:
    an ingest run holds the pipeline or must finish its batch first."""
    if request.execute and not (request.reason or "").strip():
        raise ResetError("executing a reset needs a reason (the CLI's --reason, the replay form's field 'reason'); "
                         "it is written to the ledger", pipeline=config.name)
    ledger = Ledger(ledger_uri or settings.ledger_uri(), store)
    state = ledger.state(config.name)
    if state.pending_batch_id is not None:
        raise PipelineBusyError.pending_batch(
            config.name, state.pending_owner, state.pending_batch_id, "resetting offsets: nothing was changed; run the "
            "pipeline (or wait for the active run) and reset afterwards")
    file_offsets = parse_offsets_file(request.offsets_file, config.name) if request.scenario == "from-file" else None
    with kafka_offsets(config, kafka_properties) as kafka:
        tps = kafka.partitions(config.select_topics(kafka.topic_names()))
        scope = parse_scope(list(request.scopes), tps, config.name)
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
        topic_ids = kafka.topic_ids({tp.topic for tp in scope})  # a reset onto a recreated topic adopts its new id
        time_offsets = None
        if request.scenario in ("to-datetime", "by-duration"):
            when = _resolve_time(request, config.name, clock or dt.datetime.now(dt.UTC))
            time_offsets = kafka.offsets_for_time(scope, int(when.timestamp() * 1000))
    preview = decide(config.name, request.scenario, scope, state.positions, earliest, latest, offset=request.offset,
                  shift=request.shift, time_offsets=time_offsets, file_offsets=file_offsets)
    if not request.execute:
        return ResetOutcome(preview, executed=False)
    batch_id = state.last_batch_id + 1
    at = now()
    rows = [LedgerRow(config.name, batch_id, "reset", COMMITTED, r.tp.topic, r.tp.partition,
                      r.current if r.current is not None else r.new, r.new, record_count=0, dead_letter_count=0,
                      dag_run_id=request.owner, reason=request.reason, planned_at=at, committed_at=at,
                      topic_id=topic_ids.get(r.tp.topic))
            for r in preview.rows]
    ledger.append(rows, expected=state.fingerprint, what="resetting offsets")
    log.warning("pipeline '%s': offsets reset (%s) by %s as ledger entry %d: %s", config.name, request.scenario,
                request.owner, batch_id, "; ".join(f"{r.tp} {r.current} -> {r.new}" for r in preview.rows))
    return ResetOutcome(preview, executed=True, batch_id=batch_id)


def _resolve_time(request: ResetRequest, pipeline: str, clock: dt.datetime) -> dt.datetime:
    if request.scenario == "to-datetime":
        if not request.datetime:
            raise ResetError("to-datetime needs a date-time", pipeline=pipeline)
        return parse_datetime(request.datetime, pipeline)
    if not request.duration:
        raise ResetError("by-duration needs a duration such as PT30M", pipeline=pipeline)
    return clock - parse_duration(request.duration, pipeline)
