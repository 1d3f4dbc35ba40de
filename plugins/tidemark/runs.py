"""One run of a pipeline, as the Airflow tasks and the CLI drive it: recover, plan, freeze."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from tidemark import faults, settings
from tidemark.commit import BatchPlan, decide_recovery, finalize_batch, output_txn_version
from tidemark.config import PipelineConfig
from tidemark.errors import PipelineBusyError
from tidemark.kafka_client import KafkaOffsets, commit_group_offsets
from tidemark.ledger import Ledger, LedgerState, gap_rows, planned_rows
from tidemark.offsets import OffsetRange, TopicPartition
from tidemark.planner import check_topic_ids, plan_ranges

log = logging.getLogger(__name__)

# Looks up an Airflow DAG run's state by run id (the plan task passes one built on the Task SDK).
RunStateLookup = Callable[[str], str]


def cli_run_id() -> str:
    """The owner id of a run started outside Airflow: host and pid, so liveness can be checked."""
    return f"cli:{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


def owner_is_alive(owner: str, airflow_run_state: RunStateLookup | None = None) -> bool:
    """Whether the run that owns a pending batch may still be working on it. Unknown means alive:
    taking a batch from a live run is the one thing that must not happen."""
    if owner.startswith("cli:"):
        _, host, pid, _ = owner.split(":", 3)
        if host != socket.gethostname():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if airflow_run_state is None:
        return True
    try:
        return airflow_run_state(owner) in {"queued", "running"}
    except Exception as exc:  # the run is unknown to this Airflow: it cannot be running
        log.warning("cannot look up the state of run '%s' (%s); treating it as finished", owner, exc)
        return False


def batch_plan(config: PipelineConfig, ledger: Ledger, batch_id: int, ranges, **extra) -> BatchPlan:
    """A BatchPlan with everything the ingest job needs from the pipeline config."""
    return BatchPlan(config.name, batch_id, config.table_uri, ledger.uri, list(ranges),
                     dead_letter_uri=config.dead_letter_uri, record_format=config.record_format.to_dict(),
                     partition_by=list(config.partition_by), kafka_timeout_seconds=config.kafka_timeout_seconds,
                     **extra)


def _describe(plan: BatchPlan) -> str:
    return ", ".join(f"{r.tp} [{r.start}, {r.end})" for r in plan.ranges)


def recover(config: PipelineConfig, ledger: Ledger, state: LedgerState, run_id: str,
            airflow_run_state: RunStateLookup | None = None) -> BatchPlan | None:
    """Finish an unfinished batch first. Returns the batch to execute again (same frozen ranges,
    now owned by this run), or None when nothing is pending (after rolling a committed batch
    forward). Raises PipelineBusyError when a live run owns the pending batch."""
    if state.pending_batch_id is None:
        return None
    marker = output_txn_version(config.table_uri, config.name)
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in state.pending_ranges)
    plan = batch_plan(config, ledger, state.pending_batch_id, state.pending_ranges, recovered=True,
                      run_id=state.pending_owner, dedupe=dedupe)
    if decide_recovery(state.pending_batch_id, marker) == "roll_forward":
        log.warning("pipeline '%s': batch %d is in the output table but not yet committed in the ledger; "
                    "rolling it forward", config.name, plan.batch_id)
        finalize_batch(plan)
        return None
    owner = state.pending_owner or ""
    if owner != run_id:
        if owner and owner_is_alive(owner, airflow_run_state):
            raise PipelineBusyError(
                f"another run holds the pipeline: run '{owner}' froze batch {plan.batch_id} ({_describe(plan)}) "
                f"and is still active. This run wrote nothing. Wait for it to finish (max_active_runs=1 "
                f"keeps scheduled runs apart).", pipeline=config.name)
        log.warning("pipeline '%s': run '%s' froze batch %d and is gone; this run takes it over", config.name,
                    owner, plan.batch_id)
        ledger.take_over(config.name, plan.batch_id, run_id, expected=state.fingerprint)
    plan.run_id = run_id
    log.warning("pipeline '%s': batch %d was planned but never committed; executing it again with the same "
                "frozen ranges: %s", config.name, plan.batch_id, _describe(plan))
    return plan


def _starting_offsets(config: PipelineConfig, kafka: KafkaOffsets, new: list[TopicPartition]):
    """``earliest``/``latest``, or for a start time the first offset at or after it per new
    partition (none that new: the latest offset, so nothing older is read)."""
    when = config.start_time
    if when is None or not new:
        return config.starting_offsets
    found = kafka.offsets_for_time(new, int(when.timestamp() * 1000))
    return {tp: offset for tp, offset in found.items() if offset is not None}


def prepare_batch(config: PipelineConfig, kafka_properties: Mapping[str, str], *, run_id: str | None = None,
                  ledger_uri: str | None = None, airflow_run_state: RunStateLookup | None = None) -> BatchPlan:
    """Recover, then plan and freeze the next batch. An empty plan (batch_id 0 and no ranges)
    means there is nothing new and no Spark job is needed."""
    run_id = run_id or cli_run_id()
    ledger = Ledger(ledger_uri or settings.ledger_uri())
    state = ledger.state(config.name)
    pending = recover(config, ledger, state, run_id, airflow_run_state)
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
                          on_data_loss=config.on_data_loss, max_records=config.max_records_per_run)
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
        return batch_plan(config, ledger, 0, [], run_id=run_id)
    dedupe = any(r.start < state.high_water.get(r.tp, 0) for r in ranges)
    plan = batch_plan(config, ledger, state.last_batch_id + 1 + bool(gaps), ranges, run_id=run_id, dedupe=dedupe)
    ledger.append(gaps + planned_rows(config.name, plan.batch_id, ranges, run_id, topic_ids=topic_ids),
                  expected=state.fingerprint)
    log.info("pipeline '%s': batch %d frozen (%d offsets%s): %s", config.name, plan.batch_id, plan.total_offsets,
             ", re-reading offsets already ingested: deduplicated" if dedupe else "", _describe(plan))
    faults.crash_point(faults.AFTER_PLAN_FROZEN)
    return plan


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
