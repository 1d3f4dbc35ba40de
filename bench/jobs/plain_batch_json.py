"""The ceiling for JSON values: one Spark batch read of the whole topic (earliest -> latest, no
bookkeeping), parsed by ``from_json`` (PERMISSIVE) with the declared schema as the AvailableNow
baseline does (bench/jobs/available_now_json.py), appended to a Delta table. A value that does not
parse is kept, its fields null."""

from __future__ import annotations

from bench.jobs.available_now_json import from_json_rows, parse_args
from bench.jobs.common import session, source_options


def main() -> None:
    args = parse_args(__doc__ or "", checkpoint=False)
    spark = session()
    try:
        raw = spark.read.format("kafka").options(**source_options(args.topic), endingOffsets="latest").load()
        from_json_rows(raw, args.schema).write.format("delta").mode("append").save(args.table)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
