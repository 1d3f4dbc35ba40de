"""Small files: 1,000 small batches into one output table, before and after maintenance (`make bench-maintenance`,
bench/results/maintenance.json; issue 27 item 1).

The batches are written directly as Delta appends with the layout the ingest job gives them, not through Spark
(1,000 Spark batches would take most of an hour here): BENCH_MAINT_BATCHES (1,000) commits of
BENCH_MAINT_RECORDS (200) records on 8 partitions, each commit adding one Parquet file per Kafka partition (as
the job's one Spark task per partition does), with the raw pipeline's columns, the pipeline's marker
(``txn``, app id = pipeline, version = batch id) and the batch in ``userMetadata``, and the file statistics
Delta readers skip files with. The files are written by pyarrow (snappy), the commits by delta-rs.

Measured: the table's active files and files on disk, and a full-table read (delta-rs: load the table and read
every column of every row into Arrow; median of 5, after a first read, the page cache's warm-up, reported
apart), before and after ``tidemark.operations.table_maintenance.maintain`` (what the maintenance DAG runs: OPTIMIZE
compaction, VACUUM retaining 168h, checkpoints), and the files left on disk by a VACUUM run once the 7 days have passed
(simulated by a retention of 0 on this copy of the table).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import statistics
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import machine
from bench.knobs import save_result

log = logging.getLogger("bench")
PIPELINE = "small_files"
PARTITIONS = 8
VALUE_BYTES = 100
SCHEMA = pa.schema([
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    ("kafka_timestamp", pa.timestamp("us", tz="UTC")), ("kafka_key", pa.binary()),
    ("kafka_headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("value", pa.binary()), ("ingest_batch_id", pa.int64()), ("ingested_at", pa.timestamp("us", tz="UTC"))])
STATS_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "ingest_batch_id", "ingested_at")


def _stat(value) -> object:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, dt.datetime) else value


def _stats(rows: pa.Table) -> str:
    low = {c: _stat(pc.min(rows[c]).as_py()) for c in STATS_COLUMNS}
    high = {c: _stat(pc.max(rows[c]).as_py()) for c in STATS_COLUMNS}
    nulls = {c: rows[c].null_count for c in SCHEMA.names if c != "kafka_headers"}
    return json.dumps({"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})


def _partition_rows(batch: int, partition: int, per_partition: int, now_us: int) -> pa.Table:
    first = (batch - 1) * per_partition
    offsets = pa.array(range(first, first + per_partition), pa.int64())
    stamps = pa.array([now_us + i for i in range(per_partition)], pa.timestamp("us", tz="UTC"))
    return pa.table({
        "kafka_topic": pa.array([PIPELINE] * per_partition), "kafka_partition": pa.array([partition] * per_partition,
                                                                                         pa.int32()),
        "kafka_offset": offsets, "kafka_timestamp": stamps,
        "kafka_key": pa.array([f"k{partition}-{o}".encode() for o in offsets.to_pylist()], pa.binary()),
        "kafka_headers": pa.nulls(per_partition, SCHEMA.field("kafka_headers").type),
        "value": pa.array([os.urandom(VALUE_BYTES // 2).hex().encode() for _ in range(per_partition)], pa.binary()),
        "ingest_batch_id": pa.array([batch] * per_partition, pa.int64()), "ingested_at": stamps}, schema=SCHEMA)


def write_batches(uri: Path, batches: int, records: int) -> float:
    """``batches`` commits of ``records`` records, one file per partition each; returns the seconds taken."""
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.transaction import AddAction

    DeltaTable.create(str(uri), schema=SCHEMA)
    per_partition = records // PARTITIONS
    started = time.monotonic()
    for batch in range(1, batches + 1):
        now_us = int(time.time() * 1e6)
        actions = []
        for partition in range(PARTITIONS):
            rows = _partition_rows(batch, partition, per_partition, now_us)
            name = f"part-{batch:05d}-{partition}.snappy.parquet"
            pq.write_table(rows, uri / name, compression="snappy")
            actions.append(AddAction(name, (uri / name).stat().st_size, {}, now_us // 1000, True, _stats(rows)))
        metadata = json.dumps({"tidemark": {"pipeline": PIPELINE, "batch_id": batch}})
        DeltaTable(str(uri)).create_write_transaction(
            actions, mode="append", schema=SCHEMA,
            commit_properties=CommitProperties(app_transactions=[Transaction(PIPELINE, batch)],
                                               custom_metadata={"userMetadata": metadata}))
    return time.monotonic() - started


def read_once(uri: Path) -> tuple[float, int]:
    """Load the table and read every column of every row (delta-rs' query engine): (seconds, rows)."""
    from deltalake import DeltaTable, QueryBuilder

    started = time.monotonic()
    rows = QueryBuilder().register("t", DeltaTable(str(uri))).execute("SELECT * FROM t").read_all().num_rows
    return time.monotonic() - started, rows


def read_times(uri: Path, expected: int) -> dict:
    warm_up, rows = read_once(uri)
    runs = [read_once(uri) for _ in range(5)]
    if rows != expected or any(n != expected for _, n in runs):
        raise RuntimeError(f"a full read of {uri} returned {rows} rows, not {expected}")
    return {"read_seconds": round(statistics.median(s for s, _ in runs), 3),
            "read_seconds_runs": [round(s, 3) for s, _ in runs], "first_read_seconds": round(warm_up, 3)}


def table_state(uri: Path) -> dict:
    from deltalake import DeltaTable

    table = DeltaTable(str(uri))
    return {"active_files": len(table.file_uris()), "files_on_disk": len(list(uri.glob("*.parquet"))),
            "version": table.version(), "marker": table.transaction_version(PIPELINE)}


def main() -> None:
    from tidemark.config.pipeline import parse_pipeline
    from tidemark.operations import table_maintenance

    logging.basicConfig(level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    batches = int(os.environ.get("BENCH_MAINT_BATCHES", "1000"))
    records = int(os.environ.get("BENCH_MAINT_RECORDS", "200"))
    work = Path(os.environ.get("BENCH_WORK", ".cache/bench")).resolve() / "maintenance"
    shutil.rmtree(work, ignore_errors=True)
    uri = work / PIPELINE
    uri.mkdir(parents=True)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_start": machine.load(),
           "batches": batches, "records_per_batch": records, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES}
    out["write_seconds"] = round(write_batches(uri, batches, records), 1)
    total = batches * (records // PARTITIONS) * PARTITIONS
    out["before"] = {**table_state(uri), **read_times(uri, total)}
    log.info("%d batches written in %.1f s: %s", batches, out["write_seconds"], out["before"])
    config = parse_pipeline({"name": PIPELINE, "topics": [PIPELINE], "table": str(uri),
                             "maintenance": {"optimize_every": "24h", "vacuum_retain": "168h"}}, "bench")
    started = time.monotonic()
    report = table_maintenance.maintain(config, str(work / "ledger"), None)
    out["maintain_seconds"] = round(time.monotonic() - started, 1)
    out["maintain_report"] = report["output"]
    out["after"] = {**table_state(uri), **read_times(uri, total)}
    log.info("maintenance in %.1f s: %s", out["maintain_seconds"], out["after"])
    table_maintenance.vacuum(str(uri), None, PIPELINE, dt.timedelta(0), floor=dt.timedelta(0))  # 7 days later
    out["after_vacuum_7_days_later"] = {**table_state(uri), **read_times(uri, total)}
    out["read_speedup"] = round(out["before"]["read_seconds"] / out["after"]["read_seconds"], 1)
    out["load_at_end"] = machine.load()
    shutil.rmtree(work, ignore_errors=True)
    log.info("results: %s", save_result("maintenance.json", out))


if __name__ == "__main__":
    main()
