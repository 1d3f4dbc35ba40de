"""`make bench-skew`: one batch of a skewed backlog, read with and without splitting long ranges.

The backlog (BENCH_RECORDS, default 2,000,000 events of BENCH_RECORD_BYTES on BENCH_PARTITIONS=8
partitions) has BENCH_SKEW (default 0.8) of its records on partition 0: the topic is created with one
partition, that share is produced, then it grows to 8 partitions and the rest is spread over all of
them. Each repetition (BENCH_REPEATS, default 3) runs the `tidemark run` path (plan, then the ingest
job's spark-submit) twice, alternating the order: once with `max_offsets_per_spark_task` at
BENCH_SPLIT_OFFSETS (default 500,000: the hot range is read by several tasks) and once with it above the
backlog (one task per partition, Spark's default). Every output is counted back. Results: bench/results/skew.json.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import statistics
import uuid

from bench import data, machine, stack
from bench.knobs import BenchSettings
from devkit import localstack
from tidemark.config.pipeline import PipelineConfig

log = logging.getLogger("bench")
NO_SPLIT = 10**12


def skewed_backlog(settings: BenchSettings, topic: str, share: float) -> dict:
    from kafka.admin import KafkaAdminClient, NewPartitions

    hot = int(settings.records * share)
    data.create_topic(settings, topic, 1)
    data.produce(settings, topic, hot, settings.record_bytes)
    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(settings.partitions)})
    finally:
        admin.close()
    spread = data.produce(settings, topic, settings.records - hot, settings.record_bytes, already=hot)
    return {"topic": topic, "records": settings.records, "hot_share": share,
            "records_per_partition": spread["records_per_partition"]}


def one_batch(settings: BenchSettings, topic: str, split: bool, rep: int) -> dict:
    name = f"bench_skew_{'split' if split else 'whole'}_{rep}"
    size = int(os.environ.get("BENCH_SPLIT_OFFSETS", "500000"))
    extra = {"max_offsets_per_spark_task": size if split else NO_SPLIT}
    config: PipelineConfig = stack.add_pipeline(settings, name, topic, **extra)
    plan, _ = stack.plan_batch(settings, config, expect=settings.records)
    tasks = stack.spark_tasks(settings, plan)
    measured = stack.run_ingest(settings, plan, f"the ingest job ({name})")
    found = localstack.query(config.table_uri, "SELECT COUNT(*) AS n FROM t")[0]["n"]
    if found != settings.records:
        raise RuntimeError(f"{name}: the output holds {found} rows, expected {settings.records}")
    seconds = measured.wall_seconds
    log.info("%s: %d records in %.1f s (%d records/s, minPartitions %s)", name, found, seconds, found / seconds,
             tasks)
    stack.remove_pipeline(settings, config)
    return {"split": split, "repetition": rep, "min_partitions": tasks, "records": found,
            "spark_submit_seconds": round(seconds, 1), "records_per_second": round(found / seconds),
            **measured.summary()}


def run(settings: BenchSettings) -> dict:
    """The skewed backlog on a topic of its own, then ``settings.repeats`` pairs of batches."""
    share = float(os.environ.get("BENCH_SKEW", "0.8"))
    backlog = skewed_backlog(settings, f"bench_skew_{uuid.uuid4().hex[:6]}", share)
    log.info("skewed backlog: %s", backlog)
    runs = [one_batch(settings, backlog["topic"], split, rep) for rep in range(1, settings.repeats + 1)
            for split in ((True, False) if rep % 2 else (False, True))]
    summary = {}
    for split, label in ((True, "split"), (False, "one_task_per_partition")):
        mine = sorted((r for r in runs if r["split"] == split), key=lambda r: r["spark_submit_seconds"])
        middle = mine[len(mine) // 2]
        summary[label] = {"median_seconds": middle["spark_submit_seconds"], "runs": len(mine),
                          "min_seconds": mine[0]["spark_submit_seconds"],
                          "max_seconds": mine[-1]["spark_submit_seconds"],
                          "median_records_per_second": round(settings.records / middle["spark_submit_seconds"]),
                          "median_machine_busy_share": statistics.median(r["machine_busy_share"] for r in mine),
                          "median_job_cpu_seconds": statistics.median(r["tree_cpu_seconds"] for r in mine)}
    summary["split_speedup"] = round(summary["one_task_per_partition"]["median_seconds"]
                                     / summary["split"]["median_seconds"], 2)
    return {"date": dt.date.today().isoformat(), "machine": machine.describe(), "master": settings.master,
            "split_offsets": int(os.environ.get("BENCH_SPLIT_OFFSETS", "500000")), "backlog": backlog, "runs": runs,
            "summary": summary}


def main() -> None:
    stack.run_alone(run, "skew.json")


if __name__ == "__main__":
    main()
