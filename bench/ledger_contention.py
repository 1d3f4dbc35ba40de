"""The shared ledger under contention (`make bench-ledger`, bench/results/ledger_contention.json).

Two measurements of the ledger's own writes (delta-rs, on the local disk; no Kafka, no Spark):
  * burst: BENCH_LEDGER_PIPELINES (50) pipelines, each in its own process as separate DAG runs are,
    freeze and commit BENCH_LEDGER_BURST_BATCHES (3) batches, every step started at the same moment by
    a barrier. Counted: errors that reached the caller (the target is none: every pipeline commits on
    its first try), the races lost inside the ledger's retry (tidemark.ledger.store logs each one at DEBUG),
    and the latency of each freeze (state read + compare-and-commit) and each commit flip.
  * scale: one pipeline's plan read (``Ledger.state``), freeze and commit, median of 7 rounds, on a
    ledger that already holds 10 pipelines x 10 batches and then 100 pipelines x 10,000 batches
    (2 partitions per batch: 2,000,000 rows, written by delta-rs in one big append per pipeline, the
    rows shaped like real ones). Target: the larger <= 2x the smaller.
"""

from __future__ import annotations

import datetime as dt
import logging
import multiprocessing
import os
import shutil
import statistics
import time
from pathlib import Path

import pyarrow as pa

from bench import machine
from bench.knobs import save_result
from tidemark.kafka.offsets import OffsetRange, TopicPartition
from tidemark.ledger.store import COMMITTED, SCHEMA, Ledger, planned_rows

log = logging.getLogger("bench")
PARTITIONS = 2
ROUNDS = 7


def _ms(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p95_ms": round(ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1), "n": len(ordered)}


def _ranges(name: str, batch: int) -> list[OffsetRange]:
    return [OffsetRange(name, p, (batch - 1) * 100, batch * 100) for p in range(PARTITIONS)]


def _freeze_and_commit(ledger: Ledger, name: str, batch: int) -> tuple[float, float, float]:
    """One batch as a run writes it: the plan's read, the freeze, the commit flip; seconds of each."""
    began = time.perf_counter()
    state = ledger.state(name)
    read = time.perf_counter()
    ledger.append(planned_rows(name, batch, _ranges(name, batch), f"bench-{batch}"), expected=state.fingerprint)
    frozen = time.perf_counter()
    ledger.mark_committed(name, batch, {TopicPartition(name, p): (100, 0) for p in range(PARTITIONS)})
    return read - began, frozen - read, time.perf_counter() - frozen


class _Races(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "trying again" in record.getMessage()


def _burst_pipeline(uri: str, name: str, batches: int, barrier, results) -> None:
    races = _Races()
    logger = logging.getLogger("tidemark.ledger.store")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(races)
    ledger, freezes, commits, error = Ledger(uri), [], [], None
    try:
        for batch in range(1, batches + 1):
            barrier.wait(timeout=300)
            began = time.perf_counter()
            ledger.append(planned_rows(name, batch, _ranges(name, batch), f"bench-{batch}"),
                          expected=ledger.state(name).fingerprint)
            freezes.append(time.perf_counter() - began)
            barrier.wait(timeout=300)
            began = time.perf_counter()
            ledger.mark_committed(name, batch, {TopicPartition(name, p): (100, 0) for p in range(PARTITIONS)})
            commits.append(time.perf_counter() - began)
    except Exception as exc:  # noqa: BLE001 - an error reaching the caller is what this counts
        barrier.abort()
        error = f"{type(exc).__name__}: {exc}"
    results.put({"pipeline": name, "freezes": freezes, "commits": commits, "races": races.count, "error": error})


def burst(work: Path, pipelines: int, batches: int) -> dict:
    uri = str(work / "burst")
    seed = Ledger(uri)  # the ledger exists before the race (creating it is another, tested race)
    seed.append(planned_rows("seed", 1, _ranges("seed", 1), "bench-0"), expected=seed.state("seed").fingerprint)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(pipelines), context.Queue()
    names = [f"p{i:03d}" for i in range(pipelines)]
    started = time.perf_counter()
    workers = [context.Process(target=_burst_pipeline, args=(uri, n, batches, barrier, results)) for n in names]
    for w in workers:
        w.start()
    outcome = [results.get(timeout=1800) for _ in workers]
    wall = time.perf_counter() - started
    for w in workers:
        w.join(timeout=60)
    ledger = Ledger(uri)
    committed = sum(all(r.status == COMMITTED for r in ledger.rows(n)) and len(ledger.rows(n)) == batches * PARTITIONS
                    for n in names)
    errors = [f"{o['pipeline']}: {o['error']}" for o in outcome if o["error"]]
    out = {"pipelines": pipelines, "batches_each": batches, "errors": errors, "pipelines_all_committed": committed,
           "races_lost_and_retried": sum(o["races"] for o in outcome), "wall_seconds": round(wall, 1),
           "freeze": _ms([s for o in outcome for s in o["freezes"]]),
           "commit": _ms([s for o in outcome for s in o["commits"]])}
    log.info("burst: %d pipelines x %d batches: %d errors, %d all committed, %d races retried; freeze %s, commit %s",
             pipelines, batches, len(errors), committed, out["races_lost_and_retried"], out["freeze"], out["commit"])
    return out


def _seed(uri: str, pipelines: int, batches: int) -> None:
    """``batches`` committed batches of each of ``pipelines`` pipelines, one append per pipeline."""
    from deltalake import write_deltalake

    at = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    for i in range(pipelines):
        name, n = f"p{i:03d}", batches * PARTITIONS
        batch = [b for b in range(1, batches + 1) for _ in range(PARTITIONS)]
        part = [p for _ in range(batches) for p in range(PARTITIONS)]
        columns = {"pipeline": [name] * n, "batch_id": batch, "kind": ["batch"] * n, "status": [COMMITTED] * n,
                   "topic": [name] * n, "partition": part, "start_offset": [(b - 1) * 100 for b in batch],
                   "end_offset": [b * 100 for b in batch], "record_count": [100] * n, "dead_letter_count": [0] * n,
                   "dag_run_id": [f"scheduled-{b}" for b in batch], "planned_at": [at] * n, "committed_at": [at] * n}
        table = pa.table({f.name: pa.array(columns.get(f.name, [None] * n), f.type) for f in SCHEMA})
        write_deltalake(uri, table, mode="append", partition_by=["pipeline"])


def scale_point(work: Path, pipelines: int, batches: int) -> dict:
    uri = str(work / f"scale-{pipelines}x{batches}")
    started = time.perf_counter()
    created = Ledger(uri)  # at the current schema version, as a real ledger is; its one row is another pipeline's
    created.append(planned_rows("created", 1, _ranges("created", 1), "bench-0"),
                   expected=created.state("created").fingerprint)
    _seed(uri, pipelines, batches)
    seeded = time.perf_counter() - started
    ledger, reads, freezes, commits = Ledger(uri), [], [], []
    _freeze_and_commit(ledger, "p000", batches + 1)  # warm-up
    for batch in range(batches + 2, batches + 2 + ROUNDS):
        read, freeze, commit = _freeze_and_commit(ledger, "p000", batch)
        reads.append(read), freezes.append(freeze), commits.append(commit)
    out = {"pipelines": pipelines, "batches_each": batches, "rows": pipelines * batches * PARTITIONS,
           "seed_seconds": round(seeded, 1), "plan_read": _ms(reads), "freeze": _ms(freezes), "commit": _ms(commits),
           "plan_and_commit_ms": round(statistics.median(
               r + f + c for r, f, c in zip(reads, freezes, commits, strict=True)) * 1000, 1)}
    log.info("scale: %d pipelines x %d batches: plan read %s, freeze %s, commit %s", pipelines, batches,
             out["plan_read"], out["freeze"], out["commit"])
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    work = Path(os.environ.get("BENCH_WORK", ".cache/bench")) / "ledger-contention"
    pipelines = int(os.environ.get("BENCH_LEDGER_PIPELINES", "50"))
    batches = int(os.environ.get("BENCH_LEDGER_BURST_BATCHES", "3"))
    big = int(os.environ.get("BENCH_LEDGER_SCALE_BATCHES", "10000"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load_at_start = machine.load()
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_start": load_at_start,
           "partitions_per_batch": PARTITIONS, "burst": burst(work, pipelines, batches),
           "scale": [scale_point(work, 10, 10), scale_point(work, 100, big)], "load_at_end": machine.load()}
    small, large = out["scale"]
    out["scale_ratio"] = round(large["plan_and_commit_ms"] / small["plan_and_commit_ms"], 2)
    shutil.rmtree(work, ignore_errors=True)
    log.info("results: %s (large / small plan and commit: x%s)", save_result("ledger_contention.json", out),
             out["scale_ratio"])


if __name__ == "__main__":
    main()
