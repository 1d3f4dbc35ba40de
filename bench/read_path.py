"""Spark's V1 Kafka relation against the Kafka source's DataSource V2 scan, in one JVM.

    scripts/with_broker.sh bench 19292 .venv/bin/python -m bench.read_path

A batch read of Kafka goes to Spark's V1 relation by default (``spark.sql.sources.useV1SourceList``
lists ``kafka``), whose scan turns every record into a JVM ``Row`` and back; Structured Streaming,
and Tidemark since this was measured, read through the V2 scan. The backlog is BENCH_RECORDS (default
2,000,000) events of BENCH_RECORD_BYTES on BENCH_PARTITIONS partitions; one spark-submit
(bench/jobs/read_path_job.py, Tidemark's command up to the script) takes turns, BENCH_REPEATS rounds
(default 3; after one warm-up round): each path into a noop sink and into a fresh Delta table. Taking
turns in one JVM leaves out the JVM start, which is the same for both and the largest source of spread
between processes.
Results: bench/results/read_path.json (medians per path and sink).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import statistics
import subprocess
import uuid

from bench import data, machine, stack
from bench.knobs import ROOT, BenchSettings, save_result

log = logging.getLogger("bench")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = BenchSettings.from_env()
    stack.reset_work(settings)
    stack.configure_environment(settings)
    topic = f"bench_read_path_{uuid.uuid4().hex[:6]}"
    data.produce_backlog(settings, topic)
    started = dt.datetime.now(dt.UTC)
    command = [*stack.spark_submit_base(settings, "bench-read-path"), str(ROOT / "bench" / "jobs" / "read_path_job.py"),
               "--topic", topic, "--records", str(settings.records), "--work", str(settings.work / "read_path"),
               "--rounds", str(settings.repeats)]
    done = subprocess.run(command, env=stack.spark_env(settings), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the read-path job failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    medians = {}
    for path in ("v1_relation", "v2_scan"):
        for sink in ("noop", "delta"):
            mine = [r["seconds"] for r in runs if r["path"] == path and r["sink"] == sink]
            medians[f"{path}_{sink}"] = {"median_seconds": statistics.median(mine), "seconds": mine}
    out = {"date": started.date().isoformat(), "records": settings.records, "record_bytes": settings.record_bytes,
           "partitions": settings.partitions, "rounds": settings.repeats, "machine": machine.describe(),
           "medians": medians, "runs": runs,
           "v2_over_v1": {sink: round(medians[f"v2_scan_{sink}"]["median_seconds"]
                                      / medians[f"v1_relation_{sink}"]["median_seconds"], 3)
                          for sink in ("noop", "delta")}}
    log.info("read path: %s", json.dumps(out["v2_over_v1"]))
    for key, value in medians.items():
        log.info("%s: median %.2f s %s", key, value["median_seconds"], value["seconds"])
    save_result("read_path.json", out)


if __name__ == "__main__":
    main()
