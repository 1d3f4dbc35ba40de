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

import collections
import dataclasses
import datetime as dt
import json
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import contenders, machine, page, stack
from bench.knobs import RESULTS, ROOT, BenchSettings, _int, save_result
from bench.measure import check, run_measured
from bench.profile_raw import add_task

log = logging.getLogger("bench")
JOB = str(ROOT / "bench" / "jobs" / "keyed_merge.py")
RESULT_FILE = "keyed.json"
DOC = ROOT / "docs" / "BENCHMARKS.md"
TITLE = "## Keyed tables: MERGE against AvailableNow"
TARGET_PREFIX = "| keyed table"
VALUE_SCHEMA = {"id": "bigint", "name": "string?", "qty": "int?", "price": "double?", "op": "string?"}
KEYED = {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"]}
DELETE_SHARE = 0.10
EXISTING_SHARE = 2 / 3
BOOKKEEPING = ("ingest_batch_id", "ingested_at")
KEYED_PHASES = (("startup", r"batch \d+: reading \d+ offsets"), ("read_tally_check_merge", r"batch \d+ merged into "),
                ("ledger_commit", r"batch \d+ committed in the ledger"))
TIDEMARK, NOW = "tidemark_keyed", "available_now_merge"
LABELS = {TIDEMARK: "Tidemark keyed batch (plan + spark-submit), one MERGE",
          NOW: "Structured Streaming AvailableNow, foreachBatch MERGE (txnAppId/txnVersion)"}
MERGE_METRICS = ("numSourceRows", "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
                 "numTargetRowsCopied", "numTargetFilesAdded", "numTargetFilesRemoved", "executionTimeMs",
                 "scanTimeMs", "rewriteTimeMs", "numOutputRows")
PARTS = ("compare", "replay", "growth")


@dataclass(frozen=True)
class Sizes:
    changes: int
    keys: int
    table_rows: int
    big_rows: int
    repeats: int
    big_baseline: bool
    event_log: bool

    @classmethod
    def from_env(cls) -> Sizes:
        sizes = cls(changes=_int("BENCH_KEYED_CHANGES", 2_000_000), keys=_int("BENCH_KEYED_KEYS", 200_000),
                    table_rows=_int("BENCH_KEYED_TABLE_ROWS", 1_000_000),
                    big_rows=_int("BENCH_KEYED_BIG_ROWS", 5_000_000), repeats=_int("BENCH_KEYED_REPEATS", 1),
                    big_baseline=os.environ.get("BENCH_KEYED_BIG_BASELINE", "0") == "1",
                    event_log=os.environ.get("BENCH_KEYED_EVENT_LOG", "1") != "0")
        if round(sizes.keys * EXISTING_SHARE) > sizes.table_rows:
            raise SystemExit("BENCH_KEYED_KEYS: two thirds of the keys must be rows of the table "
                             f"(BENCH_KEYED_TABLE_ROWS={sizes.table_rows:,})")
        if sizes.big_rows and sizes.big_rows <= sizes.table_rows:
            raise SystemExit("BENCH_KEYED_BIG_ROWS must be larger than BENCH_KEYED_TABLE_ROWS (0: no growth part)")
        return sizes


# --- the data ------------------------------------------------------------------------------------

def _key(k: int) -> bytes:
    return b'{"id":%d}' % k


def _upsert(k: int, name: str, qty: int, price: float) -> bytes:
    return b'{"id":%d,"name":"%s","qty":%d,"price":%.2f,"op":"upsert"}' % (k, name.encode(), qty, price)


def _delete(k: int) -> bytes:
    return b'{"id":%d,"name":null,"qty":null,"price":null,"op":"delete"}' % k


def _initial(k: int) -> tuple[str, int, float]:
    return f"init-{k}", k % 1000, (k % 10_000) / 100


def initial_rows(ids: Iterable[int]) -> Iterator[tuple[bytes, bytes]]:
    for k in ids:
        yield _key(k), _upsert(k, *_initial(k))


@dataclass
class Changes:
    """The changes, generated in a fixed order from a seed, and the reference they make: per key of the
    pool, its row at the end (None: deleted). Built independently of the product."""

    sizes: Sizes
    pool: list[int] = field(default_factory=list)
    existing: set[int] = field(default_factory=set)
    final: dict[int, tuple[str, int, float] | None] = field(default_factory=dict)
    mix: collections.Counter = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        rng = random.Random(39)
        n_existing = round(self.sizes.keys * EXISTING_SHARE)
        existing = rng.sample(range(self.sizes.table_rows), n_existing)
        new_from = max(self.sizes.big_rows, self.sizes.table_rows)
        self.pool = existing + list(range(new_from, new_from + self.sizes.keys - n_existing))
        self.existing = set(existing)

    def records(self) -> Iterator[tuple[bytes, bytes | None]]:
        rng, present, pool, final, mix = random.Random(40), set(self.existing), self.pool, self.final, self.mix
        final.clear()
        mix.clear()
        for i in range(self.sizes.changes):
            k = pool[rng.randrange(len(pool))]
            origin = "on_existing_keys" if k in self.existing else "on_new_keys"
            if rng.random() < DELETE_SHARE:
                tombstone = rng.random() < 0.5
                mix["delete" if k in present else "delete_of_absent_key"] += 1
                mix["tombstones" if tombstone else "delete_ops"] += 1
                present.discard(k)
                final[k] = None
                yield _key(k), None if tombstone else _delete(k)
            else:
                mix["update" if k in present else "insert"] += 1
                mix[f"upserts_{origin}"] += 1
                present.add(k)
                row = (f"c{i}", rng.randrange(10_000), rng.randrange(100_000) / 100)
                final[k] = row
                yield _key(k), _upsert(k, *row)

    def expected_rows(self, table_rows: int) -> int:
        """Rows of a table of ``table_rows`` starting rows once every change is applied."""
        gone = sum(1 for k, row in self.final.items() if row is None and k in self.existing)
        born = sum(1 for k, row in self.final.items() if row is not None and k not in self.existing)
        return table_rows - gone + born

    def described(self) -> dict:
        n = self.sizes.changes
        return {"changes": n, "keys": len(self.pool), "keys_held_by_the_table": len(self.existing),
                "new_keys": len(self.pool) - len(self.existing), "counts": dict(sorted(self.mix.items())),
                "shares": {k: round(v / n, 4) for k, v in sorted(self.mix.items())}, "keys_touched": len(self.final),
                "keys_deleted_at_the_end": sum(1 for r in self.final.values() if r is None)}


PRODUCER_PROPERTIES = {"acks": "1", "linger.ms": "50", "batch.size": str(512 * 1024), "compression.type": "none"}


def produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> dict:
    """Send every (key, value) to ``topic``, batched and lingering, one flush at the end: by Kafka's own
    ConsoleProducer fed through a pipe (BENCH_KEYED_PRODUCER=console, the default: a tab between key and
    value, ``NULL`` for a tombstone) or by kafka-python (``kafka-python``). Both place a key by murmur2, as
    every Kafka client does. Checks that the topic then holds that many more records."""
    from bench import data

    before = sum(data.end_offsets(settings, topic).values())
    how = os.environ.get("BENCH_KEYED_PRODUCER", "console")
    started = time.perf_counter()
    sent = _console_produce(settings, topic, records) if how == "console" else _python_produce(settings, topic,
                                                                                                records)
    seconds = time.perf_counter() - started
    offsets = data.end_offsets(settings, topic)
    if sum(offsets.values()) - before != sent:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values()) - before} new records, expected {sent}")
    return {"records": sent, "producer": how, "seconds": round(seconds, 1),
            "records_per_second": round(sent / seconds), "end_offsets": offsets}


def _console_produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> int:
    from bench.data import KAFKA_SH

    command = [KAFKA_SH, "run-class", "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
               settings.bootstrap, "--topic", topic, "--property", "parse.key=true", "--property",
               "key.separator=\t", "--property", "null.marker=NULL"]
    for key, value in PRODUCER_PROPERTIES.items():
        command += ["--producer-property", f"{key}={value}"]
    out = settings.work / "logs" / f"producer-{topic}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("ab") as sink:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.STDOUT)
    sent, chunk = 0, []
    try:
        for key, value in records:
            chunk.append(key + b"\t" + (b"NULL" if value is None else value))
            if len(chunk) == 10_000:
                proc.stdin.write(b"\n".join(chunk) + b"\n")
                sent, chunk = sent + len(chunk), []
        if chunk:
            proc.stdin.write(b"\n".join(chunk) + b"\n")
            sent += len(chunk)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    if proc.wait() != 0:
        raise RuntimeError(f"ConsoleProducer failed ({proc.returncode}):\n{out.read_text(errors='replace')[-3000:]}")
    return sent


def _python_produce(settings: BenchSettings, topic: str, records: Iterable[tuple[bytes, bytes | None]]) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=4 * 2**20, retries=5)
    sent, send = 0, producer.send
    try:
        for key, value in records:
            send(topic, key=key, value=value)
            sent += 1
        producer.flush()
    finally:
        producer.close()
    return sent


# --- tables: copies, hashes, history -------------------------------------------------------------

def copy_table(source: str | Path, target: str | Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)


def _frame(uri: str, columns: list[str] | None = None):
    from deltalake import DeltaTable

    frame = DeltaTable(uri).to_pyarrow_table(columns=columns).to_pandas()
    for name in frame.columns:
        if frame[name].dtype == object:  # bytes, header lists: their text, the same for both tables
            frame[name] = frame[name].map(repr)
    return frame


def row_hashes(uri: str, with_bookkeeping: bool):
    """Per id, a 64-bit hash of the row (every column, but the bookkeeping ones unless asked)."""
    import pandas as pd
    from deltalake import DeltaTable

    names = [f.name for f in DeltaTable(uri).schema().fields]
    frame = _frame(uri, [n for n in names if with_bookkeeping or n not in BOOKKEEPING])
    return pd.Series(pd.util.hash_pandas_object(frame, index=False).to_numpy(), index=frame["id"].to_numpy())


def fingerprint(uri: str) -> dict:
    """Row count, distinct keys and the sum (mod 2**64) of the rows' hashes, bookkeeping columns left out."""
    import numpy as np

    hashes = row_hashes(uri, with_bookkeeping=False)
    return {"rows": int(len(hashes)), "distinct_ids": int(hashes.index.nunique()),
            "row_hash_sum": str(int(hashes.to_numpy().sum(dtype=np.uint64)))}


def rows_changed(before, after) -> dict:
    """Rows that differ between two ``row_hashes`` (with bookkeeping): changed, gone, new."""
    common = before.index.intersection(after.index)
    changed = int((before.loc[common] != after.loc[common]).sum())
    return {"changed": changed, "deleted": int(len(before.index.difference(after.index))),
            "inserted": int(len(after.index.difference(before.index))),
            "total": changed + int(len(before.index.symmetric_difference(after.index)))}


def check_reference(uri: str, changes: Changes, table_rows: int, ids_below: int) -> dict:
    """The table against the reference: the row count, every changed key's row (or its absence), and every
    untouched starting row (ids below ``ids_below``) as it was produced."""
    import pandas as pd

    frame = _frame(uri, ["id", "name", "qty", "price"]).set_index("id")
    expected = changes.expected_rows(table_rows)
    problems = []
    if len(frame) != expected or not frame.index.is_unique:
        problems.append(f"{len(frame):,} rows ({frame.index.nunique():,} distinct ids), expected {expected:,}")
    deleted = [k for k, row in changes.final.items() if row is None]
    if back := int(frame.index.isin(deleted).sum()):
        problems.append(f"{back} deleted ids are in the table")
    live = pd.DataFrame([(k, *row) for k, row in changes.final.items() if row is not None],
                        columns=["id", "name", "qty", "price"]).set_index("id")
    joined = live.merge(frame, how="left", left_index=True, right_index=True, suffixes=("", "_table"))
    wrong = joined[(joined["name"] != joined["name_table"]) | (joined["qty"] != joined["qty_table"])
                   | (joined["price"] != joined["price_table"])]
    if len(wrong):
        problems.append(f"{len(wrong)} changed keys hold another row than their newest change, e.g. "
                        f"{wrong.head(3).reset_index().to_dict('records')}")
    untouched = frame[~frame.index.isin(list(changes.final)) & (frame.index < ids_below)]
    names = "init-" + pd.Series(untouched.index, index=untouched.index).astype(str)
    differ = int((untouched["name"] != names).sum())
    if differ or len(untouched) != ids_below - sum(1 for k in changes.final if k < ids_below):
        problems.append(f"{differ} untouched starting rows differ; {len(untouched):,} untouched rows")
    if problems:
        raise RuntimeError(f"{uri} differs from the reference built from the produced changes: "
                           + "; ".join(problems))
    return {"rows": len(frame), "changed_keys_checked": len(changes.final), "untouched_rows_checked": len(untouched)}


def commits_since(uri: str, version: int) -> list[dict]:
    """The table's commits after ``version``: operation, and Delta's operation metrics of a MERGE."""
    from deltalake import DeltaTable

    out = []
    for entry in DeltaTable(uri).history(50):
        if entry.get("version", -1) > version:
            metrics = entry.get("operationMetrics") or {}
            out.append({"version": entry["version"], "operation": entry.get("operation"),
                        "metrics": {k: int(metrics[k]) for k in MERGE_METRICS if k in metrics}})
    return sorted(out, key=lambda e: e["version"])


def table_version(uri: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(uri).version()


# --- Spark's event log ---------------------------------------------------------------------------

def with_event_log(command: list[str], folder: Path) -> list[str]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return [command[0], "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={folder}",
            "--conf", "spark.eventLog.compress=false", "--conf", "spark.eventLog.rolling.enabled=false", *command[1:]]


def _function_at(site: str) -> str | None:
    """The function of the core around a Python call site (``.../tidemark/spark_io.py:273``): ``tally``."""
    match = re.search(r"(tidemark\w*)/([\w/]+\.py):(\d+)", site)
    if not match:
        return None
    path = ROOT / "plugins" / match.group(1) / match.group(2)
    if not path.exists():
        return None
    for line in reversed(path.read_text().splitlines()[:int(match.group(3))]):
        if found := re.match(r"def (\w+)", line):
            return found.group(1)
    return None


def _what(description: str) -> str:
    # a streaming query's: "\nid = <query>\nrunId = <run>\nbatch = 0 - MERGE operation - ..."
    what = re.sub(r"\s*id = \S+\s+runId = \S+\s+batch = \d+\s*[-:]?\s*", " ", description or "").strip()
    short = re.sub(r"^(\w+) at .*?([\w.]+:\d+)$", r"\1 at \2", what)
    short = re.sub(r"^(\w+) at NativeMethodAccessorImpl\.java:0$", r"\1", short)  # a py4j call: no Python site
    function = _function_at(what)
    return f"{short} ({function})" if function else short or "a micro-batch (foreachBatch)"


def event_log(folder: Path) -> dict | None:
    """Spark's event log of one job: the time from the application's start to its first Spark job; the
    top-level actions (root SQL executions: what the driver's code asked for, with everything Spark and Delta
    ran for it) with their wall time, named by their call site and the core's function there, ``[MERGE]``
    when a MERGE ran inside; the Spark jobs' wall time by Delta's job description or call site; and the
    tasks' run, CPU and GC time summed."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]
    if len(files) != 1:
        log.warning("no single event log in %s: %s", folder, files)
        return None
    app_start = app_end = None
    jobs: dict[int, dict] = {}
    executions: dict[int, dict] = {}
    tasks: collections.Counter = collections.Counter()
    for line in files[0].read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_start = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            app_end = event["Timestamp"]
        elif kind.endswith("SQLExecutionStart"):
            executions[event["executionId"]] = {"root": event.get("rootExecutionId", event["executionId"]),
                                                "what": _what(event.get("description", "")), "start": event["time"]}
        elif kind.endswith("SQLExecutionEnd") and event["executionId"] in executions:
            executions[event["executionId"]]["end"] = event["time"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            what = _what(props.get("spark.job.description") or props.get("callSite.short") or "?")
            jobs[event["Job ID"]] = {"submitted": event["Submission Time"], "what": what}
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["completed"] = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            add_task(tasks, event)
    by_what: dict[str, float] = collections.defaultdict(float)
    for job in jobs.values():
        by_what[job["what"]] += (job.get("completed", job["submitted"]) - job["submitted"]) / 1000
    actions = []
    for eid, ex in sorted(executions.items(), key=lambda kv: kv[1]["start"]):
        if ex["root"] != eid:
            continue
        merged = any("MERGE" in x["what"] for x in executions.values() if x["root"] == eid)
        seconds = round((ex.get("end", ex["start"]) - ex["start"]) / 1000, 2)
        if seconds >= 0.1:
            actions.append({"what": ex["what"] + (" [MERGE]" if merged else ""), "seconds": seconds})
    first = min((j["submitted"] for j in jobs.values()), default=app_end)
    return {"app_start_to_first_job_seconds": round((first - app_start) / 1000, 2) if first and app_start else None,
            "actions": actions, "jobs": len(jobs), "jobs_seconds": round(sum(by_what.values()), 2),
            "jobs_by_what": {k: round(v, 2) for k, v in sorted(by_what.items(), key=lambda kv: -kv[1])},
            "tasks": tasks["tasks"], "task_run_seconds": round(tasks["run_ms"] / 1000, 1),
            "task_cpu_seconds": round(tasks["cpu_ns"] / 1e9, 1), "task_gc_seconds": round(tasks["gc_ms"] / 1000, 1)}


# --- the contenders ------------------------------------------------------------------------------

def add_pipeline(settings: BenchSettings, name: str, topics: list[str]):
    return stack.add_pipeline(settings, name, topics[0], topics=topics, value_format="json",
                              value_schema=VALUE_SCHEMA, keyed=KEYED)


def run_tidemark(settings: BenchSettings, sizes: Sizes, config, expect: int | None, what: str) -> dict:
    """One batch of ``config`` as `tidemark run` runs it (the plan call, then the ingest job's spark-submit),
    measured, with the commits it made and the job's phases and Spark actions."""
    from tidemark.settings import spark_jars
    from tidemark_spark import class_data

    existed = Path(config.table_uri).exists()
    version = table_version(config.table_uri) if existed else -1
    load = machine.load()
    plan, plan_seconds = stack.plan_batch(settings, config, expect=expect)
    command, env = stack.ingest_command(settings, plan)
    events = settings.work / "events" / f"{config.name}-{plan.batch_id}-{int(time.time())}"
    if sizes.event_log:
        command = with_event_log(command, events)
    sharing = class_data.prepare(env, settings.master, {}, spark_jars())
    began = time.time()
    measured = run_measured(command, sharing.environment(env))
    sharing.finish(measured.returncode)
    check(measured, what)
    contenders.keep_log(settings, f"{config.name}-batch{plan.batch_id}", measured)
    return {"batch_id": plan.batch_id, "offsets": plan.total_offsets, "plan_seconds": round(plan_seconds, 3),
            "submit_seconds": round(measured.wall_seconds, 3),
            "seconds": round(plan_seconds + measured.wall_seconds, 3),
            "timed": "plan call + spark-submit wall time", **measured.summary(),
            "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds, KEYED_PHASES),
            "commits": commits_since(config.table_uri, version) if existed else [],
            "spark": event_log(events) if sizes.event_log else None, "load_before": load, **machine.load()}


def run_available_now(settings: BenchSettings, sizes: Sizes, topic: str, table: Path, starting: dict,
                      name: str) -> dict:
    """bench/jobs/keyed_merge.py on ``table`` (a copy of the starting table), from the offsets ``starting``."""
    from tidemark.formats.record_format import RecordFormat
    from tidemark.formats.records import parse_field_type

    ddl = RecordFormat("json", tuple(parse_field_type(n, t) for n, t in VALUE_SCHEMA.items())).spark_ddl()
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / name)
    version = table_version(str(table))
    load = machine.load()
    command = [*stack.spark_submit_base(settings, f"bench-{name.replace('_', '-')}"), JOB, "--topic", topic,
               "--table", str(table), "--checkpoint", str(checkpoint), "--schema", ddl, "--key", "id",
               "--delete-field", KEYED["delete_field"], "--delete-value", KEYED["delete_values"][0],
               "--starting-offsets", json.dumps({topic: {str(p): o for p, o in starting.items()}}),
               "--app-id", f"bench_{name}"]
    events = settings.work / "events" / f"{name}-{int(time.time())}"
    if sizes.event_log:
        command = with_event_log(command, events)
    measured = check(run_measured(command, stack.spark_env(settings)), f"the {name} job")
    contenders.keep_log(settings, name, measured)
    return {"seconds": round(measured.wall_seconds, 3), "timed": "spark-submit wall time", **measured.summary(),
            "commits": commits_since(str(table), version), "spark": event_log(events) if sizes.event_log else None,
            "load_before": load, **machine.load()}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _load() -> dict:
    return {**machine.load(), "uptime": _uptime()}


def compare(tidemark: dict, available_now: dict) -> None:
    if tidemark != available_now:
        raise RuntimeError(f"the tables differ: Tidemark's {tidemark}, AvailableNow's {available_now}")


class Run:
    """One run of the part, step by step, its state in the work folder (``partial.json``) after every step, so
    that BENCH_KEYED_RESUME=1 continues where a stopped run left off: a finished step is kept, the step it was
    in is done again from the copies of the starting tables and the ledger."""

    def __init__(self, settings: BenchSettings, sizes: Sizes, parts: tuple[str, ...], resume: bool) -> None:
        self.settings, self.sizes, self.parts = settings, sizes, parts
        self.path = settings.work / "partial.json"
        self.saved = settings.work / "saved"
        self.out: dict = json.loads(self.path.read_text()) if resume and self.path.exists() else {}
        if self.out and self.out.get("sizes") != dataclasses.asdict(sizes):
            raise SystemExit(f"BENCH_KEYED_RESUME: the stopped run in {settings.work} had other sizes "
                             f"({self.out.get('sizes')}); run without BENCH_KEYED_RESUME")
        if not self.out:
            self.out = {"sizes": dataclasses.asdict(sizes), "state": {"done": []}, "backlog": {}, "setup": {},
                        "parts": {}, "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                        "load_at_start": _load()}
        self.state = self.out["state"]
        self.changes = Changes(sizes)

    # -- bookkeeping

    def keep(self) -> None:
        self.path.write_text(json.dumps(self.out, indent=2, default=str) + "\n")

    def done(self, step: str) -> bool:
        return step in self.state["done"]

    def mark(self, step: str) -> None:
        self.state["done"].append(step)
        self.keep()

    def part_started(self, part: str) -> None:
        self.out["parts"].setdefault(part, {"load_at_start": _load(), "started": time.time()})
        self.keep()

    def part_done(self, part: str) -> None:
        meta = self.out["parts"][part]
        meta |= {"date": dt.date.today().isoformat(), "load_at_end": _load(),
                 "minutes": round((time.time() - meta["started"]) / 60, 1)}
        self.mark(f"part:{part}")

    def pipeline(self, name: str, topics: list[str]):
        return add_pipeline(self.settings, name, topics)

    def restore(self) -> None:
        """Every starting table and the ledger back to the copies (nothing else runs meanwhile)."""
        for name, uri in self.state["tables"].items():
            copy_table(self.saved / name, uri)
        copy_table(self.saved / "_tidemark", self.settings.lake / "_tidemark")
        self.state["tables_state"] = {name: "saved" for name in self.state["tables"]}
        self.keep()

    def table_state(self, name: str, value: str | None = None) -> str:
        if value is not None:
            self.state.setdefault("tables_state", {})[name] = value
            self.keep()
        return self.state.get("tables_state", {}).get(name, "unknown")

    # -- the steps

    def run(self) -> dict:
        sizes, st = self.sizes, self.state
        small = bool({"compare", "replay"} & set(self.parts))
        big = "growth" in self.parts and sizes.big_rows > 0
        if not self.done("topics"):
            self.topics(big)
        changes_topic, extra_topic = st["changes_topic"], st.get("extra_topic")
        p1 = self.pipeline("bench_keyed", [changes_topic]) if small else None
        p5 = self.pipeline("bench_keyed_big", [changes_topic, extra_topic]) if big else None
        if not self.done("setup"):
            self.setup(p1, p5)
        if not self.done("changes"):
            self.produce_changes(changes_topic)
        else:
            for _ in self.changes.records():  # the reference again, from the same seed
                pass
        if "compare" in self.parts and not self.done("part:compare"):
            self.compare(p1, changes_topic)
        if "replay" in self.parts and not self.done("part:replay"):
            self.replay(p1)
        if p5 is not None and not self.done("part:growth"):
            self.growth(p5, changes_topic)
        return self.result()

    def topics(self, big: bool) -> None:
        from bench import data

        s, sizes, st = self.settings, self.sizes, self.state
        suffix = f"{int(time.time()) % 10**6}"
        st["changes_topic"] = changes_topic = f"keyed_changes_{suffix}"
        backlog = self.out["backlog"] = {"partitions": s.partitions, "topics": {"changes": changes_topic}}
        data.create_topic(s, changes_topic, s.partitions)
        log.info("producing %d starting rows ...", sizes.table_rows)
        backlog["starting_rows"] = produce(s, changes_topic, initial_rows(range(sizes.table_rows)))
        st["starting_offsets"] = backlog["starting_rows"]["end_offsets"]
        if big:
            st["extra_topic"] = extra_topic = f"keyed_extra_{suffix}"
            backlog["topics"]["extra"] = extra_topic
            data.create_topic(s, extra_topic, s.partitions)
            log.info("producing %d more rows for the big table ...", sizes.big_rows - sizes.table_rows)
            backlog["extra_rows"] = produce(s, extra_topic, initial_rows(range(sizes.table_rows, sizes.big_rows)))
        self.mark("topics")

    def setup(self, p1, p5) -> None:
        """The pipelines' first batches create the starting tables; then the tables and the ledger are copied."""
        tables = {}
        for key, config, rows in (("small", p1, self.sizes.table_rows), ("big", p5, self.sizes.big_rows)):
            if config is None:
                continue
            if f"{key}_table" not in self.out["setup"]:
                log.info("the first batch of %s creates the %d-row table ...", config.name, rows)
                self.out["setup"][f"{key}_table"] = run_tidemark(self.settings, self.sizes, config, rows,
                                                                  f"the first batch ({rows:,} rows)")
                self.keep()
            if (found := stack.table_count(config.table_uri)) != rows:
                raise RuntimeError(f"the {key} starting table holds {found:,} rows, expected {rows:,}")
            tables[key] = config.table_uri
        shutil.rmtree(self.saved, ignore_errors=True)
        self.saved.mkdir(parents=True)
        for name, uri in tables.items():
            copy_table(uri, self.saved / name)
        copy_table(self.settings.lake / "_tidemark", self.saved / "_tidemark")
        self.state["tables"] = tables
        self.state["tables_state"] = {name: "saved" for name in tables}
        self.mark("setup")

    def produce_changes(self, topic: str) -> None:
        from bench import data

        held = data.end_offsets(self.settings, topic)
        if held != {int(p): o for p, o in self.state["starting_offsets"].items()}:
            raise SystemExit(f"topic {topic} holds part of the changes from a stopped run: run again without "
                             f"BENCH_KEYED_RESUME")
        log.info("producing %d changes over %d keys ...", self.sizes.changes, self.sizes.keys)
        self.out["backlog"]["changes"] = produce(self.settings, topic, self.changes.records())
        self.out["backlog"]["mix"] = self.changes.described()
        log.info("changes: %s", self.out["backlog"]["mix"]["counts"])
        self.mark("changes")

    def apply_changes(self, p1) -> dict:
        """The small table from its copy, then Tidemark's batch of the changes (``compare``'s contender)."""
        if self.table_state("small") != "saved":
            self.restore()
        self.table_state("small", "unknown")
        row = run_tidemark(self.settings, self.sizes, p1, self.sizes.changes, "the Tidemark keyed batch")
        self.table_state("small", "changed")
        return row

    def compare(self, p1, topic: str) -> None:
        self.part_started("compare")
        runs = self.out.setdefault("runs", [])
        names = (TIDEMARK, NOW)
        for rep in range(1, self.sizes.repeats + 1):
            if self.done(f"compare:{rep}"):
                continue
            runs[:] = [r for r in runs if r["round"] != rep]
            for name in names if rep % 2 else names[::-1]:
                log.info("round %d/%d: %s ...", rep, self.sizes.repeats, LABELS[name])
                if name == TIDEMARK:
                    row = self.apply_changes(p1)
                    uri = p1.table_uri
                else:
                    table = self.settings.lake / f"available_now_{rep}"
                    copy_table(self.saved / "small", table)
                    row = run_available_now(self.settings, self.sizes, topic, table, self.state["starting_offsets"],
                                            f"available_now_merge_{rep}")
                    uri = str(table)
                row |= {"contender": name, "round": rep, "fingerprint": fingerprint(uri),
                        "changes_per_second": round(self.sizes.changes / row["seconds"])}
                runs.append(row)
                self.keep()
                log.info("round %d: %s: %.1f s (load %.2f)", rep, name, row["seconds"], row["load_1m"])
            mine = {r["contender"]: r for r in runs if r["round"] == rep}
            compare(mine[TIDEMARK]["fingerprint"], mine[NOW]["fingerprint"])
            self.out["reference"] = check_reference(p1.table_uri, self.changes, self.sizes.table_rows,
                                                    self.sizes.table_rows)
            shutil.rmtree(self.settings.lake / f"available_now_{rep}", ignore_errors=True)
            self.mark(f"compare:{rep}")
        self.part_done("compare")

    def replay(self, p1) -> None:
        """The pipeline back to the earliest offsets (an audited reset), then one batch over the whole range."""
        from tidemark.batch.reset import ResetRequest
        from tidemark.connections import EnvironmentResolver
        from tidemark.run import PipelineRun

        self.part_started("replay")
        first = None
        if self.table_state("small") != "changed":
            log.info("the changes, once, before the replay ...")
            first = self.apply_changes(p1)
            self.out["reference"] = check_reference(p1.table_uri, self.changes, self.sizes.table_rows,
                                                    self.sizes.table_rows)
        before, version = row_hashes(p1.table_uri, with_bookkeeping=True), table_version(p1.table_uri)
        self.table_state("small", "unknown")
        PipelineRun.open(p1, EnvironmentResolver()).reset(ResetRequest(
            "to-earliest", execute=True, reason="bench/keyed_changes.py: a replay of the whole range", owner="bench"))
        offsets = self.sizes.table_rows + self.sizes.changes
        log.info("the replay of the whole range (%d offsets) ...", offsets)
        replay = run_tidemark(self.settings, self.sizes, p1, offsets, "the replay")
        after = row_hashes(p1.table_uri, with_bookkeeping=True)
        self.out["replay"] = replay | {"rows_changed": rows_changed(before, after),
                                       "versions_added": table_version(p1.table_uri) - version,
                                       **({"changes_applied_first": first} if first else {})}
        self.table_state("small", "replayed")
        self.part_done("replay")

    def growth(self, p5, topic: str) -> None:
        self.part_started("growth")
        growth = self.out.setdefault("growth", {})
        if not self.done("growth:tidemark"):
            if self.table_state("big") != "saved":
                self.restore()
            self.table_state("big", "unknown")
            log.info("the same changes into the %d-row table ...", self.sizes.big_rows)
            row = run_tidemark(self.settings, self.sizes, p5, self.sizes.changes,
                               "the Tidemark keyed batch (big table)")
            self.table_state("big", "changed")
            row["fingerprint"] = fingerprint(p5.table_uri)
            row["reference"] = check_reference(p5.table_uri, self.changes, self.sizes.big_rows, self.sizes.big_rows)
            growth["tidemark"] = row
            self.mark("growth:tidemark")
        if self.sizes.big_baseline and not self.done("growth:available_now"):
            table = self.settings.lake / "available_now_big"
            copy_table(self.saved / "big", table)
            row = run_available_now(self.settings, self.sizes, topic, table, self.state["starting_offsets"],
                                    "available_now_merge_big")
            row["fingerprint"] = fingerprint(str(table))
            compare(growth["tidemark"]["fingerprint"], row["fingerprint"])
            growth["available_now"] = row
            shutil.rmtree(table, ignore_errors=True)
            self.mark("growth:available_now")
        self.part_done("growth")

    def result(self) -> dict:
        s = self.settings
        out = {k: v for k, v in self.out.items() if k not in ("state", "sizes")}
        return out | {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": _load(),
                      "settings": {**dataclasses.asdict(self.sizes), "partitions": s.partitions, "master": s.master,
                                   "driver_memory": s.driver_memory, "value_schema": VALUE_SCHEMA, "keyed": KEYED,
                                   "parts": list(self.parts)}}


def merged(new: dict, parts: tuple[str, ...]) -> dict:
    """``new`` over the results already in bench/results/keyed.json when those are of the same sizes: the parts
    not run this time keep theirs."""
    path = RESULTS / RESULT_FILE
    if set(parts) == set(PARTS) or not path.exists():
        return new
    old = json.loads(path.read_text())
    same = ("changes", "keys", "table_rows", "big_rows", "partitions", "master", "driver_memory")
    if any(old.get("settings", {}).get(k) != new["settings"].get(k) for k in same):
        log.warning("bench/results/keyed.json holds other sizes: the parts not run this time are left out")
        return new
    out = {**old, **{k: v for k, v in new.items() if k not in ("parts", "setup")}}
    keys = {"compare": ("runs", "reference"), "replay": ("replay",), "growth": ("growth",)}
    for part in PARTS:
        if part not in parts:
            for key in keys[part]:
                if key in old:
                    out[key] = old[key]
    out["parts"] = {**old.get("parts", {}), **new.get("parts", {})}
    out["setup"] = {**old.get("setup", {}), **new.get("setup", {})}
    out["settings"]["parts"] = sorted(set(old["settings"].get("parts", PARTS)) | set(parts))
    return out


# --- summary, section and targets ----------------------------------------------------------------

def _merge_commit(row: dict) -> dict:
    merges = [c for c in row.get("commits", []) if c["operation"] == "MERGE"]
    return merges[-1]["metrics"] if merges else {}


def _short_action(what: str) -> str:
    if "[MERGE]" in what:
        return "MERGE"
    found = re.search(r"\((\w+)\)$", what)
    return found.group(1) if found else what


def _spent(run_: dict) -> dict:
    """A run's driver actions (its event log) by the core's function, ``MERGE`` for the one that ran it:
    seconds in all, in the MERGE and before it."""
    by: dict[str, float] = collections.defaultdict(float)
    for a in (run_.get("spark") or {}).get("actions") or []:
        name = _short_action(a["what"])
        by["other" if a["seconds"] < 1 and name not in ("MERGE", "tally") else name] += a["seconds"]
    merge = by.get("MERGE", 0.0)
    return {"by_function": {k: round(v, 2) for k, v in by.items()}, "merge": round(merge, 2),
            "before_merge": round(sum(by.values()) - merge, 2), "actions": round(sum(by.values()), 2)}


def _part_date(out: dict, part: str) -> str:
    return out.get("parts", {}).get(part, {}).get("date", out["date"])


def _part_load(out: dict, part: str) -> str:
    meta = out.get("parts", {}).get(part) or {}
    meta = meta if "load_at_end" in meta else out
    return f"{meta['load_at_start']['load_1m']} at the start, {meta['load_at_end']['load_1m']} at the end"


def summarize(out: dict) -> dict:
    """Per contender its median, range and MERGE metrics, Tidemark / AvailableNow, where the time went, the
    replay, the growth and the targets; each from the parts measured."""
    runs = out.get("runs") or []

    def median(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs if r["contender"] == name), 2)

    summary: dict = {"contenders": {}}
    for name, label in LABELS.items():
        if mine := [r for r in runs if r["contender"] == name]:
            summary["contenders"][name] = {
                "label": label, "runs": len(mine), "median_seconds": median(name, "seconds"),
                "min_seconds": min(r["seconds"] for r in mine), "max_seconds": max(r["seconds"] for r in mine),
                "median_changes_per_second": round(out["settings"]["changes"] / median(name, "seconds")),
                "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine)),
                "median_tree_cpu_seconds": median(name, "tree_cpu_seconds"), "merge": _merge_commit(mine[-1])}
    t, n = summary["contenders"].get(TIDEMARK), summary["contenders"].get(NOW)
    if t and n:
        summary["speed_vs_available_now"] = round(n["median_seconds"] / t["median_seconds"], 3)
        tidemark_runs = [r for r in runs if r["contender"] == TIDEMARK]
        summary["tidemark_plan_seconds"] = round(statistics.median(r["plan_seconds"] for r in tidemark_runs), 3)
        summary["tidemark_phases"] = tidemark_runs[-1]["phases"]
        summary["where"] = {name: _spent([x for x in runs if x["contender"] == name][-1]) for name in LABELS}
    if replay := out.get("replay"):
        summary["replay"] = {"seconds": replay["seconds"], "offsets": replay["offsets"],
                             "rows_changed": replay["rows_changed"]["total"],
                             "versions_added": replay["versions_added"], "commits": replay["commits"],
                             "where": _spent(replay)}
    if (big := (out.get("growth") or {}).get("tidemark")) and t:
        small_merge, big_merge = t["merge"], _merge_commit(big)
        summary["growth"] = {
            "small_rows": out["settings"]["table_rows"], "big_rows": out["settings"]["big_rows"],
            "small_seconds": t["median_seconds"], "big_seconds": big["seconds"],
            "seconds_ratio": round(big["seconds"] / t["median_seconds"], 3),
            "small_merge_ms": small_merge.get("executionTimeMs"), "big_merge_ms": big_merge.get("executionTimeMs"),
            "merge_ms_ratio": round(big_merge["executionTimeMs"] / small_merge["executionTimeMs"], 3)
            if big_merge.get("executionTimeMs") and small_merge.get("executionTimeMs") else None,
            "big_phases": big["phases"], "small_merge": small_merge, "big_merge": big_merge,
            "small_where": summary["where"][TIDEMARK], "big_where": _spent(big)}
        if now_big := out["growth"].get("available_now"):
            summary["growth"]["available_now_big_seconds"] = now_big["seconds"]
            summary["growth"]["available_now_big_merge_ms"] = _merge_commit(now_big).get("executionTimeMs")
            summary["growth"]["available_now_seconds_ratio"] = round(now_big["seconds"] / n["median_seconds"], 3)
    summary["targets"] = targets(out, summary)
    return summary


def targets(out: dict, summary: dict) -> list[dict]:
    s, rows = out["settings"], []
    shape = f"{s['changes']:,} changes over {s['keys']:,} keys into {s['table_rows']:,} rows"
    if (ratio := summary.get("speed_vs_available_now")) is not None:
        t, n = summary["contenders"][TIDEMARK], summary["contenders"][NOW]
        why = ""
        if ratio < 1.0 and (w := summary["where"][TIDEMARK]) and w.get("before_merge"):
            why = (f"; before its MERGE ({w['merge']} s) Tidemark spends {w['before_merge']} s: "
                   + ", ".join(f"{k} {v} s" for k, v in w["by_function"].items() if k != "MERGE")
                   + f" (Spark's event log); AvailableNow's micro-batch, Kafka read and MERGE: "
                     f"{summary['where'][NOW]['merge']} s")
        rows.append({"target": f"keyed table, {shape}: Tidemark >= 1.0x AvailableNow with an idempotent foreachBatch "
                               f"MERGE ({_part_date(out, 'compare')})",
                     "measured": f"{ratio:.2f}x ({t['median_seconds']} s vs {n['median_seconds']} s){why}",
                     "met": ratio >= 1.0})
    if replay := summary.get("replay"):
        rows.append({"target": f"keyed table: a replay of the whole range ({replay['offsets']:,} offsets) changes 0 "
                               f"rows ({_part_date(out, 'replay')})",
                     "measured": f"{replay['rows_changed']} rows changed, {replay['versions_added']} commit(s), "
                                 f"{replay['seconds']} s", "met": replay["rows_changed"] == 0})
    if g := summary.get("growth"):
        merge = f"; its MERGE {g['merge_ms_ratio']}x" if g.get("merge_ms_ratio") else ""
        rows.append({"target": f"keyed table: the same changes into {g['big_rows']:,} rows vs {g['small_rows']:,} "
                               f"(reported, no target) ({_part_date(out, 'growth')})",
                     "measured": f"{g['seconds_ratio']}x ({g['big_seconds']} s vs {g['small_seconds']} s){merge}",
                     "met": True})
    return rows


def _n(value) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _commit(c: dict) -> str:
    m = c["metrics"]
    return (f"v{c['version']} {c['operation']} ({_n(m.get('numSourceRows'))} source rows, "
            f"{_n(m.get('numTargetRowsInserted'))} / {_n(m.get('numTargetRowsUpdated'))} / "
            f"{_n(m.get('numTargetRowsDeleted'))} rows inserted / updated / deleted, "
            f"{_n(m.get('numTargetFilesAdded'))} files added, executionTimeMs {_n(m.get('executionTimeMs'))})")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def section(part: dict) -> str:
    """The part's section of docs/BENCHMARKS.md, from its results."""
    s, m, b = part["settings"], part["summary"], part["backlog"]
    mix = b["mix"]
    shares = mix["shares"]
    parts = [TITLE, (
        f"`make bench-keyed` (bench/keyed_changes.py): {s['changes']:,} changes over {mix['keys']:,} keys "
        f"({mix['keys_held_by_the_table']:,} of them rows of the table, {mix['new_keys']:,} new) into a keyed table "
        f"of {s['table_rows']:,} rows (`keyed: {{keys: [id], delete_field: op, delete_values: [delete]}}`, ordered "
        f"by the Kafka position), {s['partitions']} partitions, `{s['master']}`, driver memory {s['driver_memory']}. "
        f"The changes, as they fall: {shares.get('upserts_on_existing_keys', 0):.0%} upserts of rows the table held, "
        f"{(shares.get('delete', 0) + shares.get('delete_of_absent_key', 0)):.0%} deletes (half of them tombstones, "
        f"half `op: delete`), {shares.get('upserts_on_new_keys', 0):.0%} upserts of new keys; replayed in order, "
        f"{shares.get('update', 0):.0%} update a present row, {shares.get('insert', 0):.0%} insert one, "
        f"{shares.get('delete', 0):.0%} delete one. The starting tables are made by Tidemark's first batch and "
        f"copied; every contender starts from a copy. Tidemark: the plan call and the ingest job's spark-submit, "
        f"as `tidemark run`; AvailableNow: `bench/jobs/keyed_merge.py` by the same spark-submit base, a "
        f"`foreachBatch` that keeps the newest change per key and MERGEs it (delete, update every column, insert) "
        f"with `spark.databricks.delta.write.txnAppId` / `txnVersion` set per micro-batch, the batch id as the "
        f"version (Delta reads these SQL confs for DML, delta-io/delta#1555). Both with Spark's event log on.")]
    if "speed_vs_available_now" in m:
        rows = []
        for name in (TIDEMARK, NOW):
            c = m["contenders"][name]
            merge = c["merge"]
            rows.append([c["label"], f"{c['median_seconds']} ({c['min_seconds']}–{c['max_seconds']})",
                         f"{c['median_changes_per_second']:,}", _n(merge.get("executionTimeMs")),
                         f"{_n(merge.get('numTargetRowsInserted'))} / {_n(merge.get('numTargetRowsUpdated'))} / "
                         f"{_n(merge.get('numTargetRowsDeleted'))}", _n(c["median_tree_cpu_seconds"]),
                         f"{c['median_peak_tree_rss_mb']:,}"])
        t = m["contenders"][TIDEMARK]
        phases = ", ".join(f"{k} {v} s" for k, v in m["tidemark_phases"].items())
        text = (f"{_part_date(part, 'compare')}, {t['runs']} round(s), one after the other: Tidemark / "
                f"AvailableNow **x{m['speed_vs_available_now']}** the speed. Both tables end with the same rows "
                f"(count, and a hash of every row over every column but `ingest_batch_id` and `ingested_at`), equal "
                f"to a reference computed from the produced changes. Tidemark's plan call "
                f"{m['tidemark_plan_seconds']} s; its job's phases (its log lines): {phases}. Load average (1 min) "
                f"{_part_load(part, 'compare')}.")
        mine, theirs = m["where"][TIDEMARK], m["where"][NOW]
        if mine["actions"]:
            text += (f" In Spark's event log Tidemark's driver actions took {mine['actions']} s: "
                     + ", ".join(f"{k} {v} s" for k, v in mine["by_function"].items())
                     + f"; AvailableNow's {theirs['actions']} s, all of it the one micro-batch that reads Kafka and "
                       "MERGEs (so its MERGE's executionTimeMs includes the Kafka read; Tidemark's MERGE reads the "
                       "batch the tally cached).")
        parts += [text, _table(["contender", "seconds", "changes/s", "MERGE executionTimeMs",
                                "rows inserted / updated / deleted", "CPU seconds (process tree)", "peak RSS, MB"],
                               rows)]
        spark_rows = []
        for name in (TIDEMARK, NOW):
            if sp := [x for x in part["runs"] if x["contender"] == name][-1].get("spark"):
                spark_rows.append([LABELS[name], _n(sp["app_start_to_first_job_seconds"]),
                                   "; ".join(f"{a['what']} {a['seconds']}" for a in sp["actions"]),
                                   _n(sp["task_cpu_seconds"]), _n(sp["task_gc_seconds"])])
        if spark_rows:
            parts += ["Where the time goes (Spark's event log of the last round, seconds): the driver's actions in "
                      "order, each with every Spark job and Delta step it ran (root SQL executions, named by the "
                      "call site and the core's function there; `[MERGE]`: the MERGE ran inside).",
                      _table(["contender", "JVM start to the first Spark job", "actions", "tasks' CPU",
                              "tasks' GC"], spark_rows)]
    if r := m.get("replay"):
        commits = "; ".join(_commit(c) for c in r["commits"]) or "none"
        where = ", ".join(f"{k} {v} s" for k, v in r["where"]["by_function"].items())
        parts.append(f"The replay ({_part_date(part, 'replay')}, load {_part_load(part, 'replay')}): the pipeline "
                     f"reset to the earliest offsets (an audited reset), then one batch over the whole range "
                     f"({r['offsets']:,} offsets: the starting rows and the changes) in {r['seconds']} s: "
                     f"**{r['rows_changed']} rows changed** (every column of every row compared, the bookkeeping "
                     f"columns too), {r['versions_added']} new table version(s): {commits}. Its driver actions: "
                     f"{where or '–'}.")
    if g := m.get("growth"):
        now = (f"; AvailableNow x{g['available_now_seconds_ratio']} ({g['available_now_big_seconds']} s, MERGE "
               f"{_n(g.get('available_now_big_merge_ms'))} ms)" if "available_now_big_seconds" in g else "")
        small_now = m["contenders"][NOW]
        growth_rows = [[f"{g['small_rows']:,}", str(g["small_seconds"]), _n(g["small_merge_ms"]),
                        _n(g["small_merge"].get("numTargetRowsCopied")),
                        ", ".join(f"{k} {v}" for k, v in g["small_where"]["by_function"].items()),
                        str(small_now["median_seconds"]), _n(small_now["merge"].get("executionTimeMs"))],
                       [f"{g['big_rows']:,}", str(g["big_seconds"]), _n(g["big_merge_ms"]),
                        _n(g["big_merge"].get("numTargetRowsCopied")),
                        ", ".join(f"{k} {v}" for k, v in g["big_where"]["by_function"].items()),
                        _n(g.get("available_now_big_seconds")), _n(g.get("available_now_big_merge_ms"))]]
        parts += [f"How the MERGE grows with the table ({_part_date(part, 'growth')}, load "
                  f"{_part_load(part, 'growth')}): the same changes into a table of {g['big_rows']:,} rows, "
                  f"Tidemark's batch **x{g['seconds_ratio']}** the time of the {g['small_rows']:,}-row table, its "
                  f"MERGE (executionTimeMs) x{g['merge_ms_ratio']}{now}. *Rows copied*: Delta's "
                  f"numTargetRowsCopied, the rows the MERGE rewrote unchanged because their files held a changed "
                  f"key.",
                  _table(["starting rows", "Tidemark batch, s", "its MERGE, executionTimeMs", "rows copied",
                          "its driver actions, s", "AvailableNow, s", "AvailableNow MERGE, executionTimeMs"],
                         growth_rows)]
    return "\n\n".join(parts)


def write_page(part: dict, doc: Path = DOC) -> None:
    """docs/BENCHMARKS.md with this part's section and Targets rows (bench/page.py)."""
    page.write_part(TITLE, section(part), TARGET_PREFIX, part["summary"]["targets"], doc)


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
    logging.basicConfig(level=logging.INFO, format="[bench-keyed %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kafka", "py4j", "deltalake", "tidemark"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    work = Path(os.environ.get("BENCH_KEYED_WORK", str(ROOT / ".cache" / "bench-keyed")))
    settings = dataclasses.replace(BenchSettings.from_env(), work=work)
    sizes = Sizes.from_env()
    parts = tuple(x.strip() for x in os.environ.get("BENCH_KEYED_PARTS", ",".join(PARTS)).split(",") if x.strip())
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"BENCH_KEYED_PARTS: unknown part(s) {', '.join(sorted(unknown))}; choose from "
                         f"{', '.join(PARTS)}")
    resume = os.environ.get("BENCH_KEYED_RESUME", "0") == "1" and (work / "partial.json").exists()
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
