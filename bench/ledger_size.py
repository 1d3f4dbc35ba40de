"""The ledger's size on disk after many entries, and what a VACUUM of it gives back (issue 42).

Writing 100,000 entries the way runs write them takes hours (two delta-rs commits each; 0.3 to 0.5 s per entry
on 2 shared cores), so the measure has two parts, one pipeline, ``ROWS`` partitions per entry, no Kafka and no
Spark (made-up ranges, a real delta-rs ledger on the local disk):

1. **seeded**: a ledger holding N committed entries (appended ``SEED_CHUNK`` entries at a time through
   ``Ledger.append``, then compacted as ``Ledger`` compacts a pipeline's files): its rows, files and bytes after
   N = 100,000 entries (and the smaller N of ``SIZES``), which is what stays after a VACUUM;
2. **as runs write it**: ``SAMPLE`` more entries on top of each seeded ledger, each an ``append`` of the planned
   rows and ``mark_committed`` (a merge, and every ``COMPACT_AFTER_FILES`` files a compaction of the pipeline's
   files): the bytes each entry adds on disk (data files no version needs any more, and the log), and how long
   it takes. A VACUUM (full, retention 0: what one 7 days later finds) then says how much of it is reclaimable.

The garbage a real ledger holds after 100,000 entries is the sum of what each entry added: the per-entry rates
measured at the sizes of ``SIZES``, added up by the trapezoid rule (an estimate, printed as one).

    make bench-ledger-size     # SIZES=1000,10000,50000,100000 SAMPLE=96 ROWS=8; bench/results/ledger_size.json
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.knobs import save_result
from tidemark.kafka.offsets import OffsetRange
from tidemark.ledger.store import COMMITTED, COMPACT_AFTER_FILES, Ledger, LedgerRow, planned_rows

PIPELINE = "bench_ledger_size"
SEED_CHUNK = 5000


def disk(uri: str) -> dict:
    """Rows, active files and bytes (what readers read), every data file on disk, and the log."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    sizes = {"data": [0, 0], "log": [0, 0]}
    for folder, _, names in os.walk(uri):
        part = "log" if "_delta_log" in Path(folder).parts else "data"
        for name in names:
            sizes[part][0] += 1
            sizes[part][1] += os.path.getsize(os.path.join(folder, name))
    return {"delta_version": table.version(), "rows": table.count(), "active_files": len(actions["path"]),
            "active_bytes": sum(actions["size_bytes"]), "data_files": sizes["data"][0], "data_bytes": sizes["data"][1],
            "log_files": sizes["log"][0], "log_bytes": sizes["log"][1]}


def entry_ranges(entry: int, rows: int) -> list[OffsetRange]:
    return [OffsetRange("orders", p, (entry - 1) * 100, entry * 100) for p in range(rows)]


def seed(uri: str, entries: int, rows: int) -> None:
    """``entries`` committed entries, as hourly runs leave them (owner, times, counts), then compacted."""
    from deltalake import DeltaTable

    ledger, start = Ledger(uri), dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    for first in range(1, entries + 1, SEED_CHUNK):
        chunk = []
        for entry in range(first, min(first + SEED_CHUNK, entries + 1)):
            at = start + dt.timedelta(hours=entry)
            chunk += [LedgerRow(PIPELINE, entry, "batch", COMMITTED, r.topic, r.partition, r.start, r.end,
                                record_count=r.size, dead_letter_count=0, dag_run_id=f"scheduled__{at.isoformat()}",
                                planned_at=at, committed_at=at + dt.timedelta(seconds=40))
                      for r in entry_ranges(entry, rows)]
        ledger.append(chunk, expected=ledger.state(PIPELINE).fingerprint)
    DeltaTable(uri).optimize.compact(partition_filters=[("pipeline", "=", PIPELINE)])


def as_runs_write_it(uri: str, first: int, count: int, rows: int) -> float:
    """``count`` entries as runs write them; returns the seconds they took."""
    ledger, started = Ledger(uri), time.perf_counter()
    for entry in range(first, first + count):
        ranges = entry_ranges(entry, rows)
        ledger.append(planned_rows(PIPELINE, entry, ranges, f"scheduled__{entry}"),
                      expected=ledger.state(PIPELINE).fingerprint)
        ledger.mark_committed(PIPELINE, entry, {r.tp: (r.size, 0) for r in ranges})
    return time.perf_counter() - started


def measure(work: Path, entries: int, sample: int, rows: int) -> dict:
    from deltalake import DeltaTable

    uri = str(work / f"offsets-{entries}")
    started = time.perf_counter()
    seed(uri, entries, rows)
    seeded = {"seconds": round(time.perf_counter() - started, 1), **disk(uri)}
    seconds = as_runs_write_it(uri, entries + 1, sample, rows)
    written = disk(uri)
    table = DeltaTable(uri)
    table.create_checkpoint()  # what maintenance does to the ledger today (its log cleanup keeps 30 days)
    began = time.perf_counter()
    deleted = table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
    vacuumed = {"seconds": round(time.perf_counter() - began, 2), "deleted_files": len(deleted), **disk(uri)}
    added = written["data_bytes"] - seeded["data_bytes"]
    seed_garbage = seeded["data_bytes"] - seeded["active_bytes"]  # the seed's own appends, compacted away
    reclaimed = written["data_bytes"] - vacuumed["data_bytes"] - seed_garbage
    result = {"entries": entries, "seeded": seeded, "sample_entries": sample, "after_sample": written,
              "after_vacuum": vacuumed, "ms_per_entry": round(seconds * 1000 / sample, 1),
              "data_bytes_per_entry": round(added / sample), "log_bytes_per_entry":
                  round((written["log_bytes"] - seeded["log_bytes"]) / sample),
              "reclaimable_bytes_per_entry": round(reclaimed / sample)}
    shutil.rmtree(uri, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}), flush=True)
    return result


def garbage_estimate(points: list[dict]) -> int:
    """The reclaimable bytes a ledger written entry by entry holds at the last size: the per-entry rates added up
    from 0 entries (the rate of the smallest size) by the trapezoid rule."""
    sizes = [(0, points[0]["reclaimable_bytes_per_entry"])] + [(p["entries"], p["reclaimable_bytes_per_entry"])
                                                                for p in points]
    return round(sum((b - a) * (ra + rb) / 2 for (a, ra), (b, rb) in zip(sizes, sizes[1:], strict=False)))


def summary(result: dict) -> dict:
    """The numbers bench/findings.md quotes: the first and the last size's, in KB and GB."""
    first, last = result["points"][0], result["points"][-1]
    return {"entries": last["entries"], "rows": last["seeded"]["rows"],
            "active_kb": round(last["seeded"]["active_bytes"] / 1024, 1),
            "reclaimable_kb_per_entry": round(last["reclaimable_bytes_per_entry"] / 1024, 1),
            "first_entries": first["entries"],
            "first_reclaimable_kb_per_entry": round(first["reclaimable_bytes_per_entry"] / 1024, 1),
            "log_kb_per_entry": round(last["log_bytes_per_entry"] / 1024, 1),
            "estimated_reclaimable_gb": round(result["estimated_reclaimable_bytes_at_last_size"] / 1024 ** 3, 2),
            "ms_per_entry": last["ms_per_entry"], "first_ms_per_entry": first["ms_per_entry"],
            "vacuum_seconds": last["after_vacuum"]["seconds"]}


def main() -> int:
    sizes = [int(s) for s in os.environ.get("SIZES", "1000,10000,50000,100000").split(",")]
    sample, rows = int(os.environ.get("SAMPLE", "96")), int(os.environ.get("ROWS", "8"))
    work = Path(tempfile.mkdtemp(prefix="tidemark-ledger-size-", dir=os.environ.get("BENCH_WORK")))
    load = os.getloadavg()[0]
    try:
        points = [measure(work, entries, sample, rows) for entries in sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": dt.date.today().isoformat(), "rows_per_entry": rows, "compact_after_files": COMPACT_AFTER_FILES,
              "points": points, "estimated_reclaimable_bytes_at_last_size": garbage_estimate(points),
              "load_average_at_start": round(load, 2), "load_average_at_end": round(os.getloadavg()[0], 2)}
    result["summary"] = summary(result)
    save_result("ledger_size.json", result)
    print(json.dumps({k: v for k, v in result.items() if k != "points"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
