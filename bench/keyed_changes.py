"""`make bench-keyed` (scripts/bench_keyed.sh): a keyed table (issue 39, item 9). BENCH_KEYED_CHANGES
(2,000,000) changes over BENCH_KEYED_KEYS (200,000) keys into a keyed table that already holds
BENCH_KEYED_TABLE_ROWS (1,000,000) rows: Tidemark's keyed batch against Structured Streaming AvailableNow with
a ``foreachBatch`` MERGE made idempotent the way Delta advises (bench/jobs/keyed_merge.py); a replay of the
whole range; and Tidemark's batch again into a table of BENCH_KEYED_BIG_ROWS (5,000,000) rows.

The data, on BENCH_PARTITIONS (8) partitions, produced by Kafka's ConsoleProducer fed through a pipe (batched,
lingering, one flush at the end; BENCH_KEYED_PRODUCER=kafka-python sends with kafka-python instead, which
managed 14,000 records/s here against the ConsoleProducer's 52,000), every record keyed ``{"id": N}`` so that
Kafka's partitioner (murmur2, in both clients) keeps each key on one partition (the default ordering of a
keyed pipeline, the Kafka position, needs that):

* topic ``changes``: the starting rows (ids 0 .. TABLE_ROWS-1, one upsert each), then the changes;
* topic ``extra``: the big table's other rows (ids TABLE_ROWS .. BIG_ROWS-1), which no change touches.

The keys of the changes: two thirds of them rows the table holds (drawn at random from its ids), one third
new ids (from BIG_ROWS on). Each change picks one of them at random: one in ten deletes it (half of them a
tombstone, half ``op: delete``), the others upsert it (every field new). So about 60 % of the changes
update a row the table held, 10 % delete and 30 % write keys the table did not hold (the first of those an
insert, the later ones updates of the new row); the results count each kind as it falls, replayed in order.

The pipelines (value_format json, ``keyed: {keys: [id], delete_field: op, delete_values: [delete]}``, the
default ordering): ``bench_keyed`` reads ``changes``, ``bench_keyed_big`` reads ``changes`` and ``extra``.
Their first batches, run before the changes are produced, create the starting tables (1M and 5M rows) the way
Tidemark creates a keyed table; the tables and the ledger are then copied aside. Then the changes are
produced, and the parts run (BENCH_KEYED_PARTS, comma-separated, default all three):

* ``compare``: Tidemark, the pipeline's next batch: the plan call then the ingest job's spark-submit (`tidemark
  run`'s path, as every Tidemark contender of the benchmark), timed; AvailableNow, bench/jobs/keyed_merge.py by
  the same spark-submit base on a copy of the same starting table, from the offsets after the starting rows,
  timed. The two tables must then hold the same rows (count, and a hash of every row over every column but
  ``ingest_batch_id`` and ``ingested_at``), and Tidemark's must equal a reference computed here from the
  produced changes; otherwise the part fails. BENCH_KEYED_REPEATS (1) rounds, alternating which goes first,
  each from the copies (table and ledger);
* ``replay``: the pipeline reset to the earliest offsets (an audited reset), then a batch over the whole range
  (starting rows and changes), timed; the rows it changed (every column compared, the bookkeeping columns
  too) and the commits it made, with Delta's operation metrics;
* ``growth``: ``bench_keyed_big``'s next batch (the same changes into the 5M-row table), timed; with
  BENCH_KEYED_BIG_BASELINE=1 AvailableNow on a copy of the 5M-row table too.

Parts run apart merge into bench/results/keyed.json (same sizes), each with its own date and load.
BENCH_KEYED_RESUME=1 continues a run that was stopped midway (its work folder and its broker's topics kept,
scripts/bench_keyed.sh): what it finished is kept, a step it was in is done again from the copies.

Every Spark job runs with Spark's event log on (both contenders alike; BENCH_KEYED_EVENT_LOG=0: off); the
results keep the driver's actions (root SQL executions) with their wall time, Delta's MERGE metrics
(``executionTimeMs``, ``scanTimeMs``, ``rewriteTimeMs``, rows copied) and Tidemark's phases from its log lines,
so that where the time goes is measured. The load average at the start and the end of each part goes into
the results: the machine is shared. Results: bench/results/keyed.json; ``python -m bench.keyed_changes --page``
writes its section and Targets rows into docs/BENCHMARKS.md from them (bench/report.py writes the page
without them).
"""
from __future__ import annotations

import json
import logging
import os
import sys

from bench import stack
from bench.keyed_data import DOC, PARTS, RESULT_FILE, Sizes
from bench.keyed_report import merged, summarize, write_page
from bench.keyed_runs import Run
from bench.knobs import RESULTS, save_result

log = logging.getLogger("bench")



def main() -> None:
    if "--page" in sys.argv[1:]:
        if not (RESULTS / RESULT_FILE).exists():
            print(f"no {RESULTS / RESULT_FILE}: docs/BENCHMARKS.md left without a keyed-table section")
            return
        part = json.loads((RESULTS / RESULT_FILE).read_text())
        part["summary"] = summarize(part)  # from the measurements, as this code summarizes them
        write_page(part)
        print(f"wrote the keyed-table section into {DOC}")
        return
    stack.log_as("bench-keyed")
    settings = stack.own_settings("keyed")
    sizes = Sizes.from_env()
    parts = tuple(x.strip() for x in os.environ.get("BENCH_KEYED_PARTS", ",".join(PARTS)).split(",") if x.strip())
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"BENCH_KEYED_PARTS: unknown part(s) {', '.join(sorted(unknown))}; choose from "
                         f"{', '.join(PARTS)}")
    resume = os.environ.get("BENCH_KEYED_RESUME", "0") == "1" and (settings.work / "partial.json").exists()
    if not resume:
        stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)  # every Spark contender maps the archive, as `tidemark run` would
    out = merged(Run(settings, sizes, parts, resume).run(), parts)
    out["summary"] = summarize(out)
    save_result(RESULT_FILE, out)
    print(json.dumps(out["summary"], indent=2, default=str))


if __name__ == "__main__":
    main()
