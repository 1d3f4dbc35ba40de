"""`make bench-cds`: the ingest job with and without class-data sharing (tidemark_spark.class_data).

    scripts/with_broker.sh bench 19292 .venv/bin/python -m bench.class_data_sharing

One topic of twice the largest size (BENCH_CDS_SIZES, default 10,000 and 2,000,000 events of
BENCH_RECORD_BYTES on BENCH_PARTITIONS partitions). Per size, each batch a fresh pipeline capped at the
size with `max_offsets_per_run`, run the `tidemark run` way (the plan call, then the ingest job's
spark-submit): first the host's first job, which starts the trainer that writes the archive into a private,
empty folder (and the wait for it, which no job takes), then BENCH_REPEATS rounds (default 3)
taking turns between sharing off (TIDEMARK_CDS_DIR=off) and on (the archive mapped). Wall time (plan
call + spark-submit) and the CPU seconds of the process tree; every output is counted back.
Results: bench/results/class_data.json.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import statistics
import time
from pathlib import Path

from bench import data, machine, stack
from bench.knobs import BenchSettings
from tidemark_spark import class_data

log = logging.getLogger("bench")
OFF, ON, FIRST = "off", "on", "first"


def sizes() -> list[int]:
    text = os.environ.get("BENCH_CDS_SIZES", "10000,2000000")
    return sorted(int(s.replace("_", "")) for s in text.split(",") if s.strip())


def one_batch(settings: BenchSettings, topic: str, size: int, sharing: str, rep: int) -> dict:
    measured, plan_seconds = stack.capped_batch(settings, f"bench_cds_{size}_{sharing}_{rep}", topic, size,
                                                f"the ingest job ({size:,} records, class-data sharing {sharing})")
    seconds = round(plan_seconds + measured.wall_seconds, 3)
    log.info("class data %s, %s records, round %d: %.1f s, %.1f CPU s", sharing, f"{size:,}", rep, seconds,
             measured.tree_cpu_seconds)
    return {"records": size, "sharing": sharing, "repetition": rep, "seconds": seconds, **measured.summary()}


def first_job(settings: BenchSettings, topic: str, size: int, folder: Path) -> dict:
    """The host's first job: it finds no archive, starts the trainer (``tidemark_spark.class_data_train``) and
    runs without one; then the wait until the trainer's archive is in place, which no job waits for (timed from
    the job's start, beside it)."""
    os.environ[class_data.DIR_ENV_VAR] = str(folder)
    config = stack.add_pipeline(settings, f"bench_cds_{size}_first", topic, max_offsets_per_run=size)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=size)
    began = time.monotonic()
    measured = stack.run_ingest(settings, plan, f"the first job ({size:,} records, it starts the trainer)")
    deadline = time.monotonic() + 900
    while not any(folder.glob("spark-*.jsa")) and time.monotonic() < deadline:
        time.sleep(0.5)
    trained = round(time.monotonic() - began, 1)
    if stack.table_count(config.table_uri) != size or not any(folder.glob("spark-*.jsa")):
        raise RuntimeError(f"{config.name}: the batch did not land, or the trainer wrote no archive into {folder}")
    stack.remove_pipeline(settings, config)
    seconds = round(plan_seconds + measured.wall_seconds, 3)
    log.info("class data: the first job, %s records: %.1f s; the trainer's archive in place %.1f s after it started",
             f"{size:,}", seconds, trained)
    return {"records": size, "sharing": FIRST, "repetition": 0, "seconds": seconds,
            "archive_ready_seconds": trained, **measured.summary()}


def run(settings: BenchSettings) -> dict:
    wanted = sizes()
    folder = settings.work / "class-data"
    stack.fresh_folder(folder)
    topic = f"bench_cds_{int(time.time())}"
    data.create_topic(settings, topic, settings.partitions)
    # each batch a fresh pipeline from offset 0
    backlog = data.produce(settings, topic, 2 * wanted[-1], settings.record_bytes)
    runs = []
    for size in wanted:
        for old in folder.glob("*"):
            old.unlink()  # each size's archive is written afresh, as on a new host
        runs.append(first_job(settings, topic, size, folder))
        for rep in range(1, settings.repeats + 1):
            for sharing in ((OFF, ON) if rep % 2 else (ON, OFF)):
                os.environ[class_data.DIR_ENV_VAR] = "off" if sharing == OFF else str(folder)
                runs.append(one_batch(settings, topic, size, sharing, rep))
    os.environ.pop(class_data.DIR_ENV_VAR, None)
    per_size = {}
    for size in wanted:
        def median(sharing: str, key: str, size: int = size) -> float:
            return statistics.median(r[key] for r in runs if r["records"] == size and r["sharing"] == sharing)

        per_size[str(size)] = {
            **{f"{s}_seconds": median(s, "seconds") for s in (FIRST, OFF, ON)},
            **{f"{s}_cpu_seconds": median(s, "tree_cpu_seconds") for s in (FIRST, OFF, ON)},
            "on_over_off": round(median(ON, "seconds") / median(OFF, "seconds"), 3),
            "cpu_on_over_off": round(median(ON, "tree_cpu_seconds") / median(OFF, "tree_cpu_seconds"), 3)}
    archive = max((p.stat().st_size for p in folder.glob("spark-*.jsa")), default=0)
    return {"date": dt.date.today().isoformat(), "machine": machine.describe(), "master": settings.master,
            "driver_memory": settings.driver_memory, "record_bytes": settings.record_bytes, "backlog": backlog,
            "rounds": settings.repeats, "archive_mb": round(archive / 2**20), "runs": runs,
            "summary": {"sizes": per_size}}


def main() -> None:
    stack.run_alone(run, "class_data.json")


if __name__ == "__main__":
    main()
