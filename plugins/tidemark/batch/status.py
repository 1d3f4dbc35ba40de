"""What a pipeline looks like now: committed offsets against Kafka's latest (lag), its recent ledger
history and health (``overview``, the Tidemark page in Airflow), and what one committed batch put in
the output (``batch_summary``). Read-only: nothing here writes to the ledger, the tables or Kafka, or
starts Spark (``consumer_group`` writes the positions' copy to Kafka)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

from tidemark import settings
from tidemark.batch.plan import BatchPlan
from tidemark.batch.prepare import kafka_offsets
from tidemark.batch.tables import output_version
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import (
    KafkaAuthenticationError,
    KafkaUnavailableError,
    PlanMismatchError,
    UnknownTopicError,
)
from tidemark.ledger.state import CHANGE_COLUMNS, KIND_REPROCESS, batch_changes
from tidemark.ledger.store import (
    COMMITTED,
    KIND_BATCH,
    KIND_GAP,
    PLANNED,
    WRITING_KINDS,
    Ledger,
    LedgerRow,
    LedgerState,
)
from tidemark.observe.freshness import hold_started
from tidemark.storage import ObjectStore

log = logging.getLogger(__name__)

HEALTHY, LAGGING, FAILING, GAP_RECORDED = "healthy", "lagging", "failing", "gap recorded"
STUCK_AFTER = dt.timedelta(hours=1)
"""A batch frozen this long ago and still not committed counts as failing."""
KIND_BACKFILL = WRITING_KINDS[1]
"""Backfill entries wrote records again but never move the committed position (history only)."""
GAPS_SHOWN_FOR = dt.timedelta(hours=24)
"""A retention gap recorded within this long makes the pipeline's status 'gap recorded'."""


def partition_status(config: PipelineConfig, kafka_properties: Mapping[str, str],
                     ledger_uri: str | None = None, *, store: ObjectStore | None = None,
                     timeout_seconds: float | None = None) -> list[dict]:
    """Per partition: committed offset, Kafka's latest offset, lag and the last committed batch
    (the ``tidemark offsets show --json`` contract). A partition never committed has
    ``committed_offset`` null and its lag counted from the earliest offset Kafka has. Under
    ``read_committed`` the latest offset is the last stable offset, and ``held_by_open_transactions``
    is the high watermark minus it: records a producer wrote in a transaction it has not yet committed
    or aborted, which no lag counts (0 under ``read_uncommitted``, which reads them); ``held_since``, when
    the hold began (the first held record's timestamp, ``tidemark.observe.freshness.hold_started``)."""
    state = Ledger(ledger_uri or settings.ledger_uri(), store).state(config.name)
    if timeout_seconds is not None:
        config = config.model_copy(update={"kafka_timeout_seconds": timeout_seconds})
    with kafka_offsets(config, kafka_properties) as kafka:
        tps = kafka.partitions(config.select_topics(kafka.topic_names()))
        earliest, latest = kafka.earliest(tps), kafka.latest(tps)
        watermarks = kafka.high_watermarks(tps) if config.isolation_level == "read_committed" else latest
    held = {tp: latest[tp] for tp in tps if tp in latest and watermarks.get(tp, 0) > latest[tp]}
    since = hold_started(kafka_properties, held, timeout_seconds=config.kafka_timeout_seconds, pipeline=config.name)
    return _status_rows(state, tps, earliest, latest, watermarks, since)


def _status_rows(state: LedgerState, tps, earliest: Mapping, latest: Mapping,
                 watermarks: Mapping | None = None, held_since: Mapping | None = None) -> list[dict]:
    """The rows of ``partition_status``; without ``watermarks`` (Kafka unknown) nothing counts as held."""
    rows = []
    for tp in sorted(set(tps) | set(state.positions)):
        committed = state.positions.get(tp)
        end = latest.get(tp)
        base = committed if committed is not None else earliest.get(tp)
        high = (watermarks or {}).get(tp)
        rows.append({
            "topic": tp.topic,
            "partition": tp.partition,
            "committed_offset": committed,
            "latest_offset": end,
            "lag": None if end is None or base is None else max(end - base, 0),
            "last_batch_id": state.last_batch.get(tp),
            "held_by_open_transactions": None if end is None or high is None else max(high - end, 0),
            "held_since": _iso((held_since or {}).get(tp)),
        })
    return rows


def partition_status_or_ledger(config: PipelineConfig, kafka_properties: Mapping[str, str] | None,
                               ledger_uri: str | None = None, *, store: ObjectStore | None = None,
                               timeout_seconds: float | None = None,
                               kafka_error: str | None = None) -> tuple[list[dict], str | None]:
    """``partition_status``, or, when Kafka cannot answer, the ledger's committed offsets alone (latest
    offset and lag null) with the reason: a status page shows what it knows instead of failing.
    Without ``kafka_properties`` (None: the connection could not be read), ``kafka_error`` says why."""
    if kafka_properties is not None:
        try:
            return partition_status(config, kafka_properties, ledger_uri, store=store,
                                    timeout_seconds=timeout_seconds), None
        except (KafkaUnavailableError, KafkaAuthenticationError, UnknownTopicError) as exc:
            kafka_error = str(exc)
    state = Ledger(ledger_uri or settings.ledger_uri(), store).state(config.name)
    return _status_rows(state, (), {}, {}), kafka_error


def history(pipeline: str, limit: int, ledger_uri: str | None = None, *,
            store: ObjectStore | None = None) -> list[dict]:
    """The pipeline's newest ``limit`` ledger rows, newest first (the ``tidemark offsets history --json``
    contract). A keyed batch's ``rows_inserted``, ``rows_updated`` and ``rows_deleted`` are the batch's totals,
    on its first row only (``tidemark.ledger.state.changes_row``); null on its other rows and on append pipelines.
    ``filtered_count``: the row's records the pipeline's transform filtered out (null without a transform); the
    names are the ledger's columns (``tidemark.ledger.state.SCHEMA``)."""
    return [history_entry(r) for r in Ledger(ledger_uri or settings.ledger_uri(), store).recent(pipeline, limit)]


def history_entry(row: LedgerRow) -> dict:
    return {"batch_id": row.batch_id, "kind": row.kind, "status": row.status, "topic": row.topic,
            "partition": row.partition, "start_offset": row.start_offset, "end_offset": row.end_offset,
            "record_count": row.record_count, "dead_letter_count": row.dead_letter_count,
            "rows_inserted": row.rows_inserted, "rows_updated": row.rows_updated, "rows_deleted": row.rows_deleted,
            "filtered_count": row.filtered_count, "dag_run_id": row.dag_run_id, "reason": row.reason,
            "committed_at": _iso(row.committed_at)}


def recent_entries(pipeline: str, count: int, ledger_uri: str | None = None, *,
                   store: ObjectStore | None = None) -> list[dict]:
    """The pipeline's newest ``count`` ledger entries (batches, backfills, resets, gaps), newest first,
    each with its ranges, counts, owner (DAG run or CLI), reason, and how long it took from freezing to
    commit; a keyed batch also with the rows its MERGE inserted, updated and deleted (``rows_*``, null
    otherwise), a transformed one with the records its transform filtered out (``filtered``, null
    otherwise; ``records`` are those that landed in the table). A batch's counts are named as in
    ``batch_summary`` and the audit: ``records``, ``dead_letters``, ``filtered``."""
    rows = Ledger(ledger_uri or settings.ledger_uri(), store).recent_batches(pipeline, count)
    entries: dict[int, list[LedgerRow]] = {}
    for row in rows:
        entries.setdefault(row.batch_id, []).append(row)
    listing = []
    for batch_id in sorted(entries, reverse=True):
        group = sorted(entries[batch_id], key=lambda r: (r.topic, r.partition))
        first = group[0]
        counts = [r.record_count for r in group if r.record_count is not None]
        dead = [r.dead_letter_count or 0 for r in group]
        committed_at = max((r.committed_at for r in group if r.committed_at), default=None)
        planned_at = min((r.planned_at for r in group if r.planned_at), default=None)
        changes = batch_changes(group)
        filtered = [r.filtered_count for r in group if r.filtered_count is not None]
        listing.append({
            "batch_id": batch_id, "kind": first.kind, "status": first.status, "owner": first.dag_run_id,
            "reason": first.reason, "planned_at": _iso(planned_at), "committed_at": _iso(committed_at),
            "duration_seconds": (round((committed_at - planned_at).total_seconds(), 3)
                                 if committed_at and planned_at else None),
            "offsets": sum(r.end_offset - r.start_offset for r in group),
            "records": sum(counts) - sum(dead) - sum(filtered) if counts else None,
            "dead_letters": sum(dead) if counts else None, "filtered": sum(filtered) if filtered else None,
            **dict(zip(CHANGE_COLUMNS, changes or (None, None, None), strict=True)),
            "ranges": [{"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset}
                       for r in group],
        })
    return listing


def health(activity: Mapping[tuple[str, str], Mapping], total_lag: int | None, now: dt.datetime,
           last_run_failed: bool = False) -> str:
    """One word for a pipeline (pure): ``failing`` when its last ingest run failed or a frozen batch has
    waited over STUCK_AFTER, ``gap recorded`` when a retention gap was recorded within GAPS_SHOWN_FOR,
    ``lagging`` when Kafka holds records it has not ingested, else ``healthy``. Unknown lag (Kafka
    unreachable) is not counted as lagging: the page says Kafka is unreachable instead. A reprocess entry
    in progress or left unfinished is no frozen batch: it holds no run back, and the page names it apart."""
    pending = [a for (kind, status), a in activity.items() if status == PLANNED and kind != KIND_REPROCESS]
    stuck = any(a.get("planned_at") and now - a["planned_at"] > STUCK_AFTER for a in pending)
    if last_run_failed or stuck:
        return FAILING
    gap = activity.get((KIND_GAP, COMMITTED)) or {}
    if gap.get("committed_at") and now - gap["committed_at"] <= GAPS_SHOWN_FOR:
        return GAP_RECORDED
    if total_lag:
        return LAGGING
    return HEALTHY


def overview(config: PipelineConfig, kafka_properties: Mapping[str, str] | None, ledger_uri: str | None = None, *,
             store: ObjectStore | None = None, timeout_seconds: float | None = None, last_run_failed: bool = False,
             kafka_error: str | None = None, now: dt.datetime | None = None) -> dict:
    """A pipeline at a glance: total lag, the last committed batch and its age (``batch`` entries only:
    they move the committed position), the last backfill apart (``last_backfill_*``: a backfill writes
    records again and moves nothing), the batch in flight, a reprocess entry of dead letters in progress or
    left unfinished (``unfinished_reprocess_*``: not a batch; the same command finishes it), recorded gaps, and
    its health (``health``).
    Kafka errors are reported in ``kafka_error``, not raised (without ``kafka_properties``, the given
    ``kafka_error`` says why)."""
    uri = ledger_uri or settings.ledger_uri()
    now = now or dt.datetime.now(dt.UTC)
    partitions, kafka_error = partition_status_or_ledger(config, kafka_properties, uri, store=store,
                                                         timeout_seconds=timeout_seconds, kafka_error=kafka_error)
    activity = Ledger(uri, store).activity(config.name)
    total_lag = None if kafka_error else sum(r["lag"] or 0 for r in partitions)
    held = None if kafka_error else sum(r["held_by_open_transactions"] or 0 for r in partitions)
    last = activity.get((KIND_BATCH, COMMITTED))  # a backfill does not move the committed position
    backfill = activity.get((KIND_BACKFILL, COMMITTED)) or {}
    pending = [a for (kind, status), a in activity.items() if status == PLANNED and kind != KIND_REPROCESS]
    reprocess = activity.get((KIND_REPROCESS, PLANNED)) or {}
    gaps = activity.get((KIND_GAP, COMMITTED)) or {}
    return {
        "pipeline": config.name, "table": config.table_uri, "topics": config.topics_label,
        "status": health(activity, total_lag, now, last_run_failed),
        "total_lag": total_lag, "held_by_open_transactions": held, "kafka_error": kafka_error,
        "last_batch_id": last["batch_id"] if last else None,
        "last_committed_at": _iso(last["committed_at"]) if last else None,
        "last_commit_age_seconds": _age(now, (last or {}).get("committed_at")),
        "pending_batch_id": max((a["batch_id"] for a in pending), default=None),
        "unfinished_reprocess_id": reprocess.get("batch_id"),
        "unfinished_reprocess_since": _iso(reprocess.get("planned_at")),
        "batches": (last or {}).get("entries", 0),
        "backfills": backfill.get("entries", 0), "last_backfill_id": backfill.get("batch_id"),
        "last_backfill_at": _iso(backfill.get("committed_at")),
        "last_backfill_age_seconds": _age(now, backfill.get("committed_at")),
        "gaps": gaps.get("entries", 0), "last_gap_at": _iso(gaps.get("committed_at")),
        "partitions": partitions,
    }


def _age(now: dt.datetime, then: dt.datetime | None) -> float | None:
    return round((now - then).total_seconds(), 1) if then else None


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def batch_summary(plan: BatchPlan, store: ObjectStore | None = None) -> dict:
    """What a committed batch put in the output, from the ledger (the counts the commit recorded) and
    the output table (its Delta version): the extra of the Airflow asset event of the output table, and the last
    line of ``tidemark run``. ``records``: written to the output; ``filtered``: by the transform; ``rows``: what
    a keyed batch's MERGE inserted, updated and deleted.
    Raises PlanMismatchError when the ledger does not hold the batch as committed."""
    rows = [r for r in Ledger(plan.ledger_uri, store).batch(plan.pipeline, plan.batch_id) if r.kind in WRITING_KINDS]
    if not rows or any(r.status != COMMITTED for r in rows):
        raise PlanMismatchError(f"batch {plan.batch_id} is not committed in the ledger ({plan.ledger_uri}); no summary "
                          f"of it can be given", pipeline=plan.pipeline)
    ranges = [{"topic": r.topic, "partition": r.partition, "start": r.start_offset, "end": r.end_offset,
               "records": (r.record_count or 0) - (r.dead_letter_count or 0) - (r.filtered_count or 0),
               "dead_letters": r.dead_letter_count or 0}
              for r in sorted(rows, key=lambda r: (r.topic, r.partition))]
    changed = [r for r in rows if r.rows_inserted is not None]  # a keyed batch: on its first row
    return {"pipeline": plan.pipeline, "batch_id": plan.batch_id, "kind": rows[0].kind, "table": plan.table_uri,
            "ranges": ranges, "records": sum(r["records"] for r in ranges),
            "filtered": sum(r.filtered_count or 0 for r in rows),
            "dead_letters": sum(r["dead_letters"] for r in ranges),
            **({"rows": {"inserted": sum(r.rows_inserted or 0 for r in changed),
                         "updated": sum(r.rows_updated or 0 for r in changed),
                         "deleted": sum(r.rows_deleted or 0 for r in changed)}} if changed else {}),
            "delta_version": output_version(plan.table_uri, plan.pipeline, plan.batch_id, store)}
