"""`make bench`: every contender on the same backlog, interleaved, BENCH_REPEATS times; the empty
runs; ledger growth; results to bench/results/bench.json, then docs/BENCHMARKS.md and its chart.

Environment: BENCH_RECORDS (2,000,000), BENCH_RECORD_BYTES (300), BENCH_PARTITIONS (8),
BENCH_REPEATS (3), BENCH_LEDGER_SIZES (10,1000,10000), BENCH_LEDGER_SMALL_COMMITS (1000),
BENCH_SPARK_MASTER (local[2]), BENCH_DRIVER_MEMORY (1g), BENCH_WORK (.cache/bench), KAFKA_PORT (set
by scripts/with_broker.sh), BENCH_SKIP (comma-separated parts to leave out: contenders, ledger,
scheduler, skew, profile, scale; a part left out keeps its results from the last bench.json, with
their date),
BENCH_CONTENDERS (comma-separated contenders to run, default all: tidemark_job, tidemark_dag,
available_now, plain_batch, consumer_perf; for a quick look at one of them).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable

from bench import contenders, data, ledger_growth, machine, profile_raw, report, scale, scheduler, skew, stack, summary
from bench.contenders import Result
from bench.knobs import RESULTS, BenchSettings, save_result

log = logging.getLogger("bench")


def _rotation(items: tuple[str, ...], rep: int) -> list[str]:
    """Interleaving: each repetition starts one contender later, so none always runs first."""
    shift = (rep - 1) % len(items)
    return list(items[shift:] + items[:shift])


def _one(settings: BenchSettings, name: str, topic: str, rep: int) -> tuple[Result, dict | None]:
    records = settings.records
    runners: dict[str, Callable[[], tuple[Result, dict | None]]] = {
        contenders.TIDEMARK_JOB: lambda: (contenders.tidemark_job(settings, topic, records, rep), None),
        contenders.TIDEMARK_DAG: lambda: contenders.tidemark_dag(settings, topic, records, rep),
        contenders.AVAILABLE_NOW: lambda: contenders.available_now(settings, topic, records, rep),
        contenders.PLAIN_BATCH: lambda: (contenders.plain_batch(settings, topic, records, rep), None),
        contenders.CONSUMER_PERF: lambda: (contenders.consumer_perf(settings, topic, records, rep), None),
    }
    return runners[name]()


def chosen_contenders() -> tuple[str, ...]:
    wanted = [n.strip() for n in os.environ.get("BENCH_CONTENDERS", "").split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(contenders.CONTENDERS))
    if unknown:
        raise SystemExit(f"BENCH_CONTENDERS: unknown contender(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(contenders.CONTENDERS)}")
    return tuple(n for n in contenders.CONTENDERS if not wanted or n in wanted)


def run_contenders(settings: BenchSettings, topic: str) -> tuple[list[dict], list[dict]]:
    runs, empty_runs = [], []
    chosen = chosen_contenders()
    for rep in range(1, settings.repeats + 1):
        for name in _rotation(chosen, rep):
            log.info("repetition %d/%d: %s ...", rep, settings.repeats, contenders.LABELS[name])
            result, empty = _one(settings, name, topic, rep)
            row = {**result.to_dict(settings.megabytes), **machine.load()}
            runs.append(row)
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, %.1f MB/s, peak RSS %.0f MB (JVM %.0f MB), "
                     "load %.2f", rep, settings.repeats, name, row["seconds"], row["records_per_second"],
                     row["mb_per_second"], row["peak_tree_rss_mb"], row["peak_jvm_rss_mb"], row["load_1m"])
            if empty is not None:
                empty_runs.append(empty)
                log.info("repetition %d/%d: empty run (%s): %.1f s wall, %d JVM(s) started%s", rep, settings.repeats,
                         empty["kind"], empty["wall_seconds"], empty["jvms_started"],
                         f", plan task {empty['plan_task_seconds']} s, ingest task {empty['ingest_task_state']}"
                         if "plan_task_seconds" in empty else "")
    return runs, empty_runs


def save(results: dict) -> str:
    """Write what there is so far (with its summary) to bench/results/bench.json."""
    results["summary"] = summary.summarize(results)
    return str(save_result("bench.json", results))


def _previous() -> dict:
    path = RESULTS / "bench.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _kept(results: dict, previous: dict, keys: tuple[str, ...]) -> None:
    """A part left out keeps its last results, marked with the run they came from."""
    for key in keys:
        if key in previous:
            results[key] = previous[key]
            origin = previous.get("kept_from", {}).get(key, previous.get("started_at"))
            results.setdefault("kept_from", {})[key] = origin


def _run_parts(settings: BenchSettings, results: dict, previous: dict, skip: set[str]) -> None:
    """The parts `make bench` runs in this process, each saved as it ends; a part in BENCH_SKIP keeps the result
    of the run before."""
    topic = None
    if "contenders" not in skip:
        log.info("migrating the benchmark's Airflow database in %s", settings.airflow_home)
        stack.migrate_airflow()
        topic = f"bench_orders_{int(time.time())}"
        log.info("producing %d records of %d bytes to %s (%d partitions) with ProducerPerformance", settings.records,
                 settings.record_bytes, topic, settings.partitions)
        results["backlog"] = data.produce_backlog(settings, topic)
        log.info("backlog ready: %s", results["backlog"])
        stack.train_class_data(settings)
        results["class_data_archive"] = str(stack.class_data_archive(settings))
        results["runs"], results["empty_runs"] = run_contenders(settings, topic)
        save(results)
    else:
        _kept(results, previous, ("backlog", "runs", "empty_runs"))
    if "scheduler" not in skip:
        if topic is None:  # the contenders were left out: a backlog of the same shape for this part
            topic = f"bench_orders_{int(time.time())}"
            results.setdefault("scheduler_backlog", data.produce_backlog(settings, topic))
        log.info("the DAG under a running scheduler (scripts/airflow.sh: LocalExecutor on PostgreSQL)")
        results["scheduler"] = scheduler.run(settings, topic, settings.records)
        save(results)
    else:
        _kept(results, previous, ("scheduler",))
    if "ledger" not in skip:
        log.info("ledger growth: sizes %s, and %d batches written as runs write them", settings.ledger_sizes,
                 settings.ledger_small_commits)
        results["ledger_growth"] = ledger_growth.run(settings)
        save(results)
    else:
        _kept(results, previous, ("ledger_growth",))
    for name, part in (("skew", skew), ("profile", profile_raw), ("scale", scale)):
        if name in skip:
            _kept(results, previous, (name,))
            continue
        log.info("%s ...", name)
        results[name] = part.run(settings)
        save(results)


def main() -> None:
    stack.log_as("bench", "httpx")
    settings = BenchSettings.from_env()
    skip = set(filter(None, os.environ.get("BENCH_SKIP", "").split(",")))
    previous = _previous()
    started = time.monotonic()
    stack.reset_work(settings)
    stack.configure_environment(settings)
    results: dict = {"started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                     "machine": machine.describe(), "load_at_start": machine.load(),
                     "settings": {"records": settings.records, "record_bytes": settings.record_bytes,
                                  "partitions": settings.partitions, "repeats": settings.repeats,
                                  "master": settings.master, "driver_memory": settings.driver_memory,
                                  "megabytes": round(settings.megabytes, 1)}}
    log.info("machine: %s", results["machine"])
    _run_parts(settings, results, previous, skip)
    # the parts that run as programs of their own, from their result files (as bench.report folds them in)
    results["parts"] = summary.side_parts()
    results["load_at_end"] = machine.load()
    results["wall_minutes"] = round((time.monotonic() - started) / 60, 1)
    log.info("results: %s", save(results))
    report.write(results)
    log.info("done in %.1f min", results["wall_minutes"])


if __name__ == "__main__":
    main()
