"""Spark Structured Streaming with Trigger.AvailableNow: the Kafka source into a Delta sink with
a checkpoint, run until everything available at the start is processed."""

from __future__ import annotations

from bench.jobs.common import output_rows, parse_args, session, source_options


def main() -> None:
    args = parse_args(__doc__ or "")
    if not args.checkpoint:
        raise SystemExit("--checkpoint is required")
    spark = session()
    try:
        raw = spark.readStream.format("kafka").options(**source_options(args.topic)).load()
        query = (output_rows(raw).writeStream.format("delta").option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True).start(args.table))
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
