"""Ledger growth: how plan time changes with the number of committed batches in the ledger.

Two shapes of ledger, both for a pipeline whose topic has nothing new (the plan reads the ledger,
asks Kafka, and freezes nothing):
  * synthetic: N committed batches (one row per partition and batch, shaped like real rows)
    written with delta-rs in a few big appends: a few files, a few commits;
  * protocol: batches written the way runs write them (a 'planned' append, then the merge that
    flips the rows to 'committed'): two Delta commits and about one small file per batch.
Timed: ``Ledger.state`` (the ledger read inside the plan), the full read it replaced (every row of the
pipeline through ``derive_state``) and ``tidemark.batch.prepare_batch`` (the whole plan task's call).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from bench import data, stack
from bench.knobs import BenchSettings
from tidemark.config.pipeline import PipelineConfig
from tidemark.kafka.client import KafkaOffsets
from tidemark.kafka.offsets import OffsetRange
from tidemark.ledger.store import COMMITTED, SCHEMA, Ledger, LedgerRow, derive_state, planned_rows

log = logging.getLogger("bench")
PIPELINE = "bench_ledger"
TIMINGS = 7
SEED_CHUNK = 2000
RECORDS_PER_PARTITION = 12_500


def timed_ms(call: Callable[[], object], times: int = TIMINGS) -> dict:
    """Median and range of ``times`` calls (after one warm-up), in milliseconds."""
    call()
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1),
            "max_ms": round(max(samples), 1)}


def batch_ranges(topic: str, ends: dict[int, int], batch: int, batches: int) -> list[OffsetRange]:
    """Batch ``batch`` of ``batches`` splits each partition evenly; the last one ends at the end."""
    ranges = [OffsetRange(topic, p, (batch - 1) * end // batches, batch * end // batches) for p, end in ends.items()]
    return [r for r in ranges if r.size > 0]


def synthetic_rows(topic: str, topic_id: str, ends: dict[int, int], first: int, count: int,
                   batches: int) -> pa.Table:
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = []
    for batch in range(first, first + count):
        at = start + dt.timedelta(hours=batch)
        run = f"scheduled__{at.isoformat()}"
        rows += [LedgerRow(PIPELINE, batch, "batch", COMMITTED, r.topic, r.partition, r.start, r.end,
                           record_count=r.size, dead_letter_count=0, dag_run_id=run, planned_at=at,
                           committed_at=at + dt.timedelta(seconds=40), topic_id=topic_id)
                 for r in batch_ranges(topic, ends, batch, batches)]
    return pa.Table.from_pylist([{f.name: getattr(r, f.name, None) for f in SCHEMA} for r in rows], schema=SCHEMA)


def seed_synthetic(uri: str, topic: str, topic_id: str, ends: dict[int, int], batches: int) -> None:
    from deltalake import write_deltalake

    for first in range(1, batches + 1, SEED_CHUNK):
        count = min(SEED_CHUNK, batches - first + 1)
        write_deltalake(uri, synthetic_rows(topic, topic_id, ends, first, count, batches), mode="append",
                        partition_by=["pipeline"])


def log_facts(uri: str) -> dict:
    """What the table looks like: commits, checkpoints, active data files, rows."""
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    entries = os.listdir(Path(uri) / "_delta_log")
    return {"delta_version": table.version(), "log_json_files": sum(e.endswith(".json") for e in entries),
            "checkpoints": sum(e.endswith(".checkpoint.parquet") for e in entries),
            "active_files": len(table.file_uris()), "rows": table.count()}


def measure(uri: str, config: PipelineConfig | None, settings: BenchSettings) -> dict:
    ledger = Ledger(uri)
    result = {"state": timed_ms(lambda: Ledger(uri).state(PIPELINE)),
              "full_read": timed_ms(lambda: derive_state(ledger.rows(PIPELINE))),
              "one_batch": timed_ms(lambda: ledger.batch(PIPELINE, 1)),  # a committed batch's summary
              **log_facts(uri)}
    if config is not None:
        def plan() -> None:
            batch, _ = stack.plan_batch(settings, config, ledger_uri=uri)
            if not batch.is_empty:
                raise RuntimeError(f"the ledger-growth plan froze a batch: {batch.to_json()}")
        result["plan"] = timed_ms(plan)
    return result


def prepare_topic(settings: BenchSettings) -> tuple[str, str, dict[int, int]]:
    """A topic for the plan to find nothing new in: its name, Kafka topic id and end offsets."""
    topic = f"bench_ledger_{int(time.time())}"
    data.create_topic(settings, topic, settings.partitions)
    data.produce(settings, topic, RECORDS_PER_PARTITION * settings.partitions, settings.record_bytes)
    with KafkaOffsets(stack.kafka_properties(settings)) as kafka:
        topic_id = kafka.topic_ids({topic})[topic]
    return topic, topic_id, data.end_offsets(settings, topic)


def synthetic(settings: BenchSettings, topic: str, topic_id: str, ends: dict[int, int],
              config: PipelineConfig) -> list[dict]:
    results = []
    for batches in settings.ledger_sizes:
        uri = str(stack.fresh_folder(settings.work / "ledgers" / f"synthetic-{batches}"))
        started = time.perf_counter()
        seed_synthetic(uri, topic, topic_id, ends, batches)
        seeded = time.perf_counter() - started
        result = {"shape": "synthetic", "batches": batches, "seed_seconds": round(seeded, 1),
                  **measure(uri, config, settings)}
        log.info("ledger growth, synthetic, %d batches: state %.1f ms, full read %.1f ms, plan %.1f ms (%s)",
                 batches, result["state"]["median_ms"], result["full_read"]["median_ms"],
                 result["plan"]["median_ms"], {k: result[k] for k in ("log_json_files", "checkpoints", "active_files")})
        results.append(result)
        stack.drop_table(uri)
    return results


def protocol(settings: BenchSettings, topic: str, topic_id: str, ends: dict[int, int],
             config: PipelineConfig) -> list[dict]:
    """Batches written as runs write them; measured at 10, 100, 1,000, ... batches on the way."""
    batches = settings.ledger_small_commits
    checkpoints = {n for n in (10, 100, 1000, 10_000) if n < batches} | {batches}
    uri = str(stack.fresh_folder(settings.work / "ledgers" / "protocol"))
    ledger = Ledger(uri)
    results, window, started = [], [], time.perf_counter()
    for batch in range(1, batches + 1):
        ranges = batch_ranges(topic, ends, batch, batches)
        began = time.perf_counter()
        state = ledger.state(PIPELINE)
        ledger.append(planned_rows(PIPELINE, batch, ranges, f"bench-{batch}", topic_ids={topic: topic_id}),
                      expected=state.fingerprint)
        ledger.mark_committed(PIPELINE, batch, {r.tp: (r.size, 0) for r in ranges})
        window.append(time.perf_counter() - began)
        if batch in checkpoints:
            result = {"shape": "protocol", "batches": batch, "seed_seconds": round(time.perf_counter() - started, 1),
                      "write_ms_per_batch_recent": round(statistics.mean(window[-10:]) * 1000, 1),
                      **measure(uri, config if batch == batches else None, settings)}
            log.info("ledger growth, protocol, %d batches: state %.1f ms, full read %.1f ms, last batches' writes "
                     "%.0f ms each (%s)", batch, result["state"]["median_ms"], result["full_read"]["median_ms"],
                     result["write_ms_per_batch_recent"],
                     {k: result[k] for k in ("log_json_files", "checkpoints", "active_files")})
            results.append(result)
    stack.drop_table(uri)
    return results


def run(settings: BenchSettings) -> dict:
    topic, topic_id, ends = prepare_topic(settings)
    config = stack.add_pipeline(settings, PIPELINE, topic)
    try:
        shaped = synthetic(settings, topic, topic_id, ends, config)
        return {"topic": topic, "partitions": len(ends), "synthetic": shaped,
                "protocol": protocol(settings, topic, topic_id, ends, config)}
    finally:
        (settings.pipelines / f"{PIPELINE}.yaml").unlink(missing_ok=True)


