"""`make bench-scale` (and a part of `make bench`): does the ingest job stay flat as the backlog grows?

One topic of the largest size (BENCH_SCALE_SIZES, default 2,000,000,6,000,000,12,000,000 events of
BENCH_RECORD_BYTES on BENCH_PARTITIONS partitions). Each batch is a fresh pipeline capped at one size
with `max_offsets_per_run` (the plan shares the cap over the partitions), run the `tidemark run` way:
the plan, then the ingest job's spark-submit (`local[2]`, driver memory BENCH_DRIVER_MEMORY). Each
repetition (BENCH_SCALE_REPEATS, default BENCH_REPEATS) runs every size, rotating which goes first.
Throughput, peak RSS of the driver JVM (in `local` mode it is also the executor) and of the Python
driver, per size; every output is counted back. Results: bench/results/scale.json.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import statistics
import time

from bench import data, machine, stack
from bench.knobs import BenchSettings

log = logging.getLogger("bench")


def sizes() -> list[int]:
    text = os.environ.get("BENCH_SCALE_SIZES", "2000000,6000000,12000000")
    return sorted(int(s.replace("_", "")) for s in text.split(",") if s.strip())


def one_batch(settings: BenchSettings, topic: str, size: int, rep: int) -> dict:
    measured, _ = stack.capped_batch(settings, f"bench_scale_{size}_{rep}", topic, size,
                                     f"the ingest job ({size:,} records)")
    row = {"records": size, "repetition": rep, "records_per_second": round(size / measured.wall_seconds, 1),
           "python_driver_rss_mb": round(measured.peak_python_rss_mb, 1),
           **measured.summary()}
    log.info("scale %s/%d: %.1f s, %.0f records/s, driver JVM peak RSS %.0f MB, tree %.0f MB", f"{size:,}", rep,
             measured.wall_seconds, row["records_per_second"], measured.peak_jvm_rss_mb, measured.peak_tree_rss_mb)
    return row


def run(settings: BenchSettings) -> dict:
    wanted = sizes()
    repeats = int(os.environ.get("BENCH_SCALE_REPEATS", str(settings.repeats)))
    topic = f"bench_scale_{int(time.time())}"
    data.create_topic(settings, topic, settings.partitions)
    started = time.perf_counter()
    log.info("scale: producing %s records to %s", f"{wanted[-1]:,}", topic)
    backlog = {**data.produce(settings, topic, wanted[-1], settings.record_bytes),
               "produce_seconds": round(time.perf_counter() - started, 1)}
    runs = []
    for rep in range(1, repeats + 1):
        shift = (rep - 1) % len(wanted)
        runs += [one_batch(settings, topic, size, rep) for size in wanted[shift:] + wanted[:shift]]
    per_size = {}
    for size in wanted:
        mine = [r for r in runs if r["records"] == size]
        per_size[str(size)] = {
            "runs": len(mine),
            "median_seconds": statistics.median(r["wall_seconds"] for r in mine),
            "median_records_per_second": statistics.median(r["records_per_second"] for r in mine),
            "median_peak_jvm_rss_mb": statistics.median(r["peak_jvm_rss_mb"] for r in mine),
            "max_peak_jvm_rss_mb": max(r["peak_jvm_rss_mb"] for r in mine),
            "median_python_driver_rss_mb": statistics.median(r["python_driver_rss_mb"] for r in mine),
            "median_peak_tree_rss_mb": statistics.median(r["peak_tree_rss_mb"] for r in mine)}
    small, large = per_size[str(wanted[0])], per_size[str(wanted[-1])]
    summary = {"sizes": per_size,
               "throughput_ratio": round(large["median_records_per_second"] / small["median_records_per_second"], 3),
               "jvm_rss_ratio": round(large["median_peak_jvm_rss_mb"] / small["median_peak_jvm_rss_mb"], 3),
               "python_rss_ratio": round(large["median_python_driver_rss_mb"] / small["median_python_driver_rss_mb"],
                                         3)}
    return {"date": dt.date.today().isoformat(), "machine": machine.describe(), "master": settings.master,
            "driver_memory": settings.driver_memory, "record_bytes": settings.record_bytes, "backlog": backlog,
            "runs": runs, "summary": summary}


def main() -> None:
    stack.run_alone(run, "scale.json")


if __name__ == "__main__":
    main()
