"""`make bench-s3`: one batch of the benchmark's backlog (BENCH_RECORDS, default 2,000,000 events of
BENCH_RECORD_BYTES) through the `tidemark run` path (plan, then the ingest job's spark-submit), with
the lake on the local disk and then on the local S3 server (scripts/storage.sh, S3_PORT), alternating,
BENCH_REPEATS times (default 3, as `make bench`). Every run's output is counted back. Results go to
bench/results/object_storage.json.

The S3 figures are those of this machine's S3 server (moto, in-process Python, on loopback): they show
what the S3A write path and the put-if-absent commits cost here, not what AWS S3 or MinIO would do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import uuid

from bench import data, machine, stack
from bench.knobs import BenchSettings, save_result
from devkit import localstack

log = logging.getLogger("bench")


def one_batch(settings: BenchSettings, topic: str, target: str, rep: int) -> dict:
    lake = str(settings.lake) if target == "local" else f"s3a://lake/bench-{uuid.uuid4().hex[:8]}"
    os.environ["TIDEMARK_LAKE_ROOT"] = lake
    store = stack.s3_store(localstack.s3_endpoint(), localstack.S3_ACCESS_KEY,
                           localstack.S3_SECRET_KEY) if target == "s3" else stack.local_store()
    config = stack.add_pipeline(settings, f"bench_{target}_{rep}", topic)
    plan, _ = stack.plan_batch(settings, config, expect=settings.records)
    measured = stack.run_ingest(settings, plan, f"the ingest job ({target})", store=store)
    found = localstack.query(config.table_uri, "SELECT COUNT(*) AS n FROM t")[0]["n"]
    if found != settings.records:
        raise RuntimeError(f"{target}: the output holds {found} rows, expected {settings.records}")
    seconds = measured.wall_seconds
    result = {"target": target, "repetition": rep, "lake": lake, "records": found,
              "spark_submit_seconds": round(seconds, 1), "records_per_second": round(found / seconds),
              "mb_per_second": round(settings.megabytes / seconds, 1), **measured.summary()}
    log.info("%s, repetition %d: %d records in %.1f s (%d records/s)", target, rep, found, seconds,
             result["records_per_second"])
    return result


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = BenchSettings.from_env()
    stack.reset_work(settings)
    stack.configure_environment(settings)
    topic = f"bench_s3_{uuid.uuid4().hex[:6]}"
    backlog = data.produce_backlog(settings, topic)
    log.info("backlog: %d records of %d bytes in %s", settings.records, settings.record_bytes, topic)
    runs = [one_batch(settings, topic, target, rep) for rep in range(1, settings.repeats + 1)
            for target in (("local", "s3") if rep % 2 else ("s3", "local"))]
    summary = {}
    for target in ("local", "s3"):
        mine = [r["spark_submit_seconds"] for r in runs if r["target"] == target]
        summary[target] = {"median_seconds": sorted(mine)[len(mine) // 2], "runs": len(mine)}
    summary["s3_over_local"] = round(summary["s3"]["median_seconds"] / summary["local"]["median_seconds"], 2)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "backlog": backlog,
           "runs": runs, "summary": summary}
    save_result("object_storage.json", out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
