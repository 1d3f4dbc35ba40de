"""`make bench-small`: a small batch (BENCH_SMALL_RECORDS, default 10,000 events of BENCH_RECORD_BYTES on
BENCH_PARTITIONS partitions), the common case of a frequent schedule, run by the ingest job two ways:

* spark-submit (the default): a JVM per batch;
* the warm path: the same job as a client of a running Spark Connect server (scripts/connect.sh, started by
  the make target at SPARK_CONNECT_URL), no JVM of its own.

Each repetition (BENCH_REPEATS, default 5) produces one batch's records, then plans and runs it once
per launcher (two pipelines on the same topic, so both read the same records), alternating which goes
first. The first warm run after the server starts is run and reported apart (the server's own warm-up:
class loading and JIT). Every output is counted back. Results: bench/results/small_batch.json.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import statistics
import uuid

from bench import data, machine, stack
from bench.knobs import BenchSettings, save_result
from devkit import localstack

log = logging.getLogger("bench")
SUBMIT, WARM = stack.SUBMIT, stack.WARM


def run_batch(settings: BenchSettings, config, launcher: str, url: str) -> dict:
    plan, _ = stack.plan_batch(settings, config)
    measured = stack.run_ingest(settings, plan, f"the ingest job ({launcher}, batch {plan.batch_id})",
                                launcher=launcher, connect_url=url)
    found = localstack.query(config.table_uri, "SELECT COUNT(*) AS n FROM t")[0]["n"]
    log.info("%s: batch %d of %d offsets in %.2f s (%d JVMs started)", launcher, plan.batch_id, plan.total_offsets,
             measured.wall_seconds, len(measured.jvm_pids))
    return {"launcher": launcher, "batch_id": plan.batch_id, "offsets": plan.total_offsets, "table_rows": found,
            **measured.summary()}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = BenchSettings.from_env()
    records = int(os.environ.get("BENCH_SMALL_RECORDS", "10000"))
    repeats = int(os.environ.get("BENCH_REPEATS", "5"))
    url = os.environ["SPARK_CONNECT_URL"]
    stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)  # as a host's earlier jobs leave it: every spark-submit batch maps it
    topic = f"bench_small_{uuid.uuid4().hex[:6]}"
    data.create_topic(settings, topic, settings.partitions)
    configs = {launcher: stack.add_pipeline(settings, f"bench_small_{launcher.replace('-', '_')}", topic)
               for launcher in (SUBMIT, WARM)}
    produced = 0
    data.produce(settings, topic, records, settings.record_bytes)
    produced += records
    first_warm = run_batch(settings, configs[WARM], WARM, url)  # the server's first batch: its warm-up
    runs = [run_batch(settings, configs[SUBMIT], SUBMIT, url)]
    for rep in range(1, repeats + 1):
        data.produce(settings, topic, records, settings.record_bytes, already=produced)
        produced += records
        order = (SUBMIT, WARM) if rep % 2 else (WARM, SUBMIT)
        for launcher in order:
            runs.append({**run_batch(settings, configs[launcher], launcher, url), "repetition": rep})
    for launcher, config in configs.items():
        total = localstack.query(config.table_uri, "SELECT COUNT(*) AS n FROM t")[0]["n"]
        if total != produced:
            raise RuntimeError(f"{launcher}: the output holds {total} rows, {produced} were produced")
    summary = {}
    for launcher in (SUBMIT, WARM):
        mine = [r for r in runs if r["launcher"] == launcher and "repetition" in r]
        summary[launcher] = {"median_seconds": round(statistics.median(r["wall_seconds"] for r in mine), 2),
                             "min_seconds": min(r["wall_seconds"] for r in mine),
                             "max_seconds": max(r["wall_seconds"] for r in mine), "runs": len(mine),
                             "jvms_started_per_batch": max(r["jvms_started"] for r in mine),
                             "median_peak_tree_rss_mb": statistics.median(r["peak_tree_rss_mb"] for r in mine)}
    summary["warm_speedup"] = round(summary[SUBMIT]["median_seconds"] / summary[WARM]["median_seconds"], 2)
    summary["first_warm_batch_seconds"] = first_warm["wall_seconds"]
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "master": settings.master,
           "server": {"url": url, "master": os.environ.get("CONNECT_MASTER", "local[2]")},
           "records_per_batch": records, "record_bytes": settings.record_bytes, "partitions": settings.partitions,
           "first_warm_batch": first_warm, "runs": runs, "summary": summary}
    save_result("small_batch.json", out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
