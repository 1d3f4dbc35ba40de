"""The ceiling: one Spark batch read of the whole topic (earliest -> latest) appended to a Delta
table, with no bookkeeping at all (no ledger, no plan, no read check, no commit marker)."""

from __future__ import annotations

from bench.jobs.common import output_rows, parse_args, session, source_options


def main() -> None:
    args = parse_args(__doc__ or "")
    spark = session()
    try:
        raw = spark.read.format("kafka").options(**source_options(args.topic), endingOffsets="latest").load()
        output_rows(raw).write.format("delta").mode("append").save(args.table)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
