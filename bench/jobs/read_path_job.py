"""The job of bench/read_path.py: in one SparkSession, taking turns, the same bounded read of the whole
topic through Spark's V1 Kafka relation (Spark's default for a batch read) and through the Kafka
source's DataSource V2 scan (``kafka`` taken out of ``spark.sql.sources.useV1SourceList``, as
``tidemark.batch.spark.batch_io.read_ranges`` does), each into a noop sink (the read alone) and appended to a fresh
Delta table (counted back). A first round warms the JVM up and is not reported (the JIT, Spark's and
Delta's classes: otherwise the path that runs first pays them). Prints one JSON line per measurement."""

from __future__ import annotations

import argparse
import json
import shutil
import time

from bench.jobs.common import output_rows, session, source_options
from tidemark.batch.spark.batch_io import V1_SOURCES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True, help="the topic's records (each table is counted)")
    parser.add_argument("--work", required=True, help="a folder for the Delta tables")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = session()
    v1 = spark.conf.get(V1_SOURCES)
    paths = {"v1_relation": v1, "v2_scan": ",".join(s for s in v1.split(",") if s.strip().lower() != "kafka")}
    for round_ in range(args.rounds + 1):  # round 0: the warm-up
        for path, sources in paths.items():
            for sink in ("noop", "delta"):
                spark.conf.set(V1_SOURCES, sources)
                rows = output_rows(spark.read.format("kafka").options(**source_options(args.topic))
                                   .option("endingOffsets", "latest").load())
                table = f"{args.work}/{path}-{round_}"
                shutil.rmtree(table, ignore_errors=True)
                started = time.perf_counter()
                if sink == "noop":
                    rows.write.format("noop").mode("overwrite").save()
                else:
                    rows.write.format("delta").mode("append").save(table)
                seconds = time.perf_counter() - started
                if sink == "delta" and (found := spark.read.format("delta").load(table).count()) != args.records:
                    raise SystemExit(f"{path}: the table holds {found} rows, expected {args.records}")
                if round_:
                    print(json.dumps({"round": round_, "path": path, "sink": sink, "seconds": round(seconds, 3)}),
                          flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
