"""How long the ingest job's Kafka read takes to fail when the broker stops answering mid-read.

    scripts/with_broker.sh stall 19792 .venv/bin/python bench/kafka_stall.py [TIMEOUT_SECONDS]

Produces a backlog on one partition, starts the same bounded read the ingest job makes
(`tidemark.batch.spark.batch_io.kafka_source_options` with the pipeline's `kafka_timeout_seconds`), freezes the
broker with SIGSTOP as soon as Spark has a stage running, and prints the seconds from the freeze to
the failure, which the error text promises to be about `kafka_timeout_seconds`."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devkit import localstack  # noqa: E402
from tidemark.batch.plan import BatchPlan  # noqa: E402
from tidemark.batch.spark.batch_io import kafka_source_options  # noqa: E402
from tidemark.kafka.offsets import OffsetRange  # noqa: E402
from tidemark.settings import require_spark_jars  # noqa: E402


def broker_pid() -> int:
    pid_file = Path(os.environ["KAFKA_HOME"]) / "broker.pid"
    return int(pid_file.read_text().strip())


def main() -> None:
    timeout_s = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    from pyspark.sql import SparkSession

    topic = localstack.create_topic(localstack.unique("stall"), partitions=1)
    localstack.produce_values(topic, [b"x" * 2000] * 100_000)
    end = localstack.end_offsets(topic)[0]
    spark = (SparkSession.builder.master("local[1]").config("spark.jars", ",".join(require_spark_jars()))
             .config("spark.ui.enabled", "false").getOrCreate())
    plan = BatchPlan("stall", 1, "/tmp/unused", "/tmp/unused", [OffsetRange(topic, 0, 0, end)],
                     kafka_timeout_seconds=timeout_s)
    frozen = {}

    def freeze() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not tracker.getActiveStageIds():
            time.sleep(0.05)
        time.sleep(1.0)  # the read is under way
        os.kill(broker_pid(), signal.SIGSTOP)
        frozen["at"] = time.monotonic()

    threading.Thread(target=freeze, daemon=True).start()
    try:
        options = kafka_source_options(plan, {"bootstrap.servers": localstack.bootstrap()})
        spark.read.format("kafka").options(**options).load().selectExpr("length(value) AS n") \
            .groupBy().sum("n").collect()
        print("the read finished before the broker was frozen; produce a bigger backlog")
    except Exception as exc:
        waited = time.monotonic() - frozen["at"]
        first = str(exc).strip().splitlines()[0][:200]
        print(f"kafka_timeout_seconds={timeout_s}: failed {waited:.1f} s after the broker froze ({first})")
    finally:
        os.kill(broker_pid(), signal.SIGCONT)
        spark.stop()


if __name__ == "__main__":
    main()
