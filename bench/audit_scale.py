"""`tidemark audit` on a large output table (`make bench-audit`, bench/results/audit.json).

An output table of BENCH_AUDIT_ROWS rows (default 10,000,000; the sizes in BENCH_AUDIT_SIZES, comma-separated,
default "1000000,10000000"), written by delta-rs in appends of 1,000,000 rows shaped like the output of a raw
pipeline (the Kafka columns, a 20-byte value, batch columns), with its ledger (batches of 100,000 records over
8 partitions, each committed with its counts) and a dead-letter table of 0.1 % of the records. No Kafka, no
Spark: the audit reads only Delta tables. Each size is audited in a fresh process
(``tidemark.audit.live_table.audit_tables``, what `tidemark audit` runs) three times; reported: wall seconds (median)
and the process's peak RSS (its ``VmHWM``, the largest of the three), with the table's size on disk.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from bench import machine
from bench.knobs import save_result

log = logging.getLogger("bench")
PARTITIONS = 8
PER_BATCH = 100_000
CHUNK = 1_000_000
DEAD_EVERY = 1000
RUNS = 3
PIPELINE = "audited"


def _chunk(first: int, count: int) -> tuple[pa.Table, pa.Table]:
    """Output rows ``first .. first + count`` (record i: partition i % 8, offset i // 8, batch i // 100,000
    + 1), without every 1,000th record, which is a dead letter instead."""
    import pyarrow.compute as pc

    index = pa.array(range(first, first + count), pa.int64())
    partition = pc.cast(pc.bit_wise_and(index, PARTITIONS - 1), pa.int32())
    offset = pc.shift_right(index, 3)
    batch = pc.add(pc.divide(index, PER_BATCH), 1)
    stamp = pc.cast(pc.add(pc.multiply(index, 1000), 1_700_000_000_000_000), pa.timestamp("us", tz="UTC"))
    value = pa.array([b"x" * 20] * count, pa.binary())
    rows = pa.table({"kafka_topic": pa.array(["orders"] * count, pa.string()), "kafka_partition": partition,
                     "kafka_offset": offset, "kafka_timestamp": stamp,
                     "kafka_key": pc.cast(pc.cast(index, pa.string()), pa.binary()), "value": value,
                     "ingest_batch_id": batch, "ingested_at": stamp})
    dead = pc.equal(pc.remainder(index, DEAD_EVERY), 0) if hasattr(pc, "remainder") else None
    if dead is None:  # older pyarrow: modulo by hand
        dead = pc.equal(pc.subtract(index, pc.multiply(pc.divide(index, DEAD_EVERY), DEAD_EVERY)), 0)
    letters = rows.filter(dead).append_column("pipeline", pa.array([PIPELINE] * pc.sum(dead).as_py(), pa.string()))
    return rows.filter(pc.invert(dead)), letters.append_column("error", pa.array(["bad"] * letters.num_rows))


def build(work: Path, rows: int) -> dict:
    """The output, dead-letter and ledger tables of one size under ``work``."""
    from deltalake import write_deltalake

    from tidemark.ledger.store import COMMITTED, Ledger, LedgerRow, fingerprint

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    for first in range(0, rows, CHUNK):
        output, dead = _chunk(first, min(CHUNK, rows - first))
        write_deltalake(str(work / "out"), output, mode="append")
        write_deltalake(str(work / "dead"), dead, mode="append")
    ledger = []
    for b in range(rows // PER_BATCH):
        for p in range(PARTITIONS):
            start, end = b * PER_BATCH // PARTITIONS, (b + 1) * PER_BATCH // PARTITIONS
            ledger.append(LedgerRow(PIPELINE, b + 1, "batch", COMMITTED, "orders", p, start, end, end - start, None))
    Ledger(str(work / "ledger")).append(ledger, expected=fingerprint([]))
    size = sum(f.stat().st_size for f in (work / "out").rglob("*.parquet"))
    return {"rows": rows, "ledger_ranges": len(ledger), "output_mb": round(size / 2**20),
            "build_seconds": round(time.monotonic() - started, 1)}


AUDIT = ("import json, re, sys; from tidemark.audit.live_table import audit_tables; w = sys.argv[1]; "
         "r = audit_tables('audited', w + '/out', w + '/dead', w + '/ledger'); "
         "peak = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
         "print(json.dumps({'ok': r.ok, 'records': r.records, 'checked_ranges': r.checked_ranges, 'peak_kb': peak}))")
"""The audit in a child process, which reports its own peak RSS (``VmHWM``: the high-water mark of its own
address space; the ``ru_maxrss`` of a forked child also counts the parent's pages at the fork)."""


def audit_once(work: Path) -> tuple[float, int, dict]:
    """One audit in a fresh process: (wall seconds, peak RSS in MB, what it reported)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", AUDIT, str(work)], stdout=subprocess.PIPE, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    seconds = time.monotonic() - started
    report = json.loads(done.stdout)
    return seconds, report["peak_kb"] // 1024, report


def measure(work: Path, rows: int) -> dict:
    point = build(work / str(rows), rows)
    runs = [audit_once(work / str(rows)) for _ in range(RUNS)]
    report = runs[0][2]
    if not report["ok"] or report["records"] != rows - rows // DEAD_EVERY:
        raise RuntimeError(f"the audit of {rows:,} rows did not find the table clean: {report}")
    point.update(audit_seconds=round(statistics.median(s for s, _, _ in runs), 1),
                 audit_seconds_runs=[round(s, 1) for s, _, _ in runs], peak_rss_mb=max(m for _, m, _ in runs),
                 checked_ranges=report["checked_ranges"])
    shutil.rmtree(work / str(rows), ignore_errors=True)
    log.info("%s rows: audit %.1f s (median of %d), peak RSS %d MB", f"{rows:,}", point["audit_seconds"], RUNS,
             point["peak_rss_mb"])
    return point


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    work = Path(os.environ.get("BENCH_WORK", ".cache/bench")) / "audit"
    sizes = [int(s) for s in os.environ.get("BENCH_AUDIT_SIZES", "1000000,10000000").split(",") if s]
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_start": machine.load(),
           "partitions": PARTITIONS, "records_per_batch": PER_BATCH, "dead_letter_every": DEAD_EVERY,
           "sizes": [measure(work, rows) for rows in sizes], "load_at_end": machine.load()}
    shutil.rmtree(work, ignore_errors=True)
    log.info("results: %s", save_result("audit.json", out))


if __name__ == "__main__":
    main()
