"""`make bench-json`: JSON values with a declared schema, read into typed columns of a Delta table by
Tidemark and by the baselines, all parsing the same schema with Spark's ``from_json``.

The backlog is BENCH_JSON_RECORDS (default 1,000,000) JSON order events of BENCH_RECORD_BYTES=300
bytes each (bench/data.py's, sent by Kafka's ProducerPerformance in two halves) on BENCH_PARTITIONS=8
partitions, plus one poison line per 1,000 events, sent between the two halves by kafka-python, round
robin over the partitions (so that every partition holds bad records): every other one ``{not json``,
the others an order event cut in half. The schema is 7 of the event's fields (order_id bigint,
customer_id bigint, amount double, currency string, status string, created_at timestamp, note string;
its ``items`` array is not declared). The contenders, interleaved, BENCH_REPEATS times (default 3),
each on BENCH_SPARK_MASTER (local[2]) with the same spark-submit base:

- tidemark_json: the `tidemark run` path (the plan call, then the ingest job's spark-submit) of a
  pipeline with ``value_format: json`` and that ``value_schema``: one pass over Kafka writes the good
  records while Spark tallies them, then the partitions that held bad records are read again for the
  dead-letter table (with the reason of each);
- available_now_json: Structured Streaming, Trigger.AvailableNow, ``from_json`` (PERMISSIVE) with the
  same schema, the poison kept as rows of nulls, no dead-letter table (bench/jobs/available_now_json.py);
- plain_batch_json: one plain Spark batch read doing the same, no checkpoint, no bookkeeping
  (bench/jobs/plain_batch_json.py).

BENCH_JSON_CONTENDERS (comma-separated) runs some of them only. Every output is counted back (Tidemark:
output rows + dead letters = the backlog; the baselines: every record, the poison as rows of nulls)
and fingerprinted (sums over every parsed field of the good rows), so all of them must have parsed
the same values. Throughput counts every record of the topic, poison included. Work folder:
BENCH_JSON_WORK (.cache/bench-json). Results: bench/results/typed_json.json.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import random
import re
import statistics
import time
import uuid
from pathlib import Path

from bench import contenders, data, machine, side, stack
from bench.measure import Measurement, check, run_measured
from bench.settings import ROOT, BenchSettings, _int, save_result
from devkit import localstack
from tidemark.batch.prepare import prepare_batch
from tidemark.records import RecordFormat, parse_field_type

log = logging.getLogger("bench")
JOBS = ROOT / "bench" / "jobs"

TIDEMARK = "tidemark_json"
AVAILABLE_NOW = "available_now_json"
PLAIN_BATCH = "plain_batch_json"
CONTENDERS = (TIDEMARK, AVAILABLE_NOW, PLAIN_BATCH)
LABELS = {
    TIDEMARK: "Tidemark ingest job (plan + spark-submit), JSON with dead letters",
    AVAILABLE_NOW: "Structured Streaming AvailableNow, from_json (PERMISSIVE)",
    PLAIN_BATCH: "Plain Spark batch read, from_json (PERMISSIVE)",
}

VALUE_SCHEMA = {"order_id": "bigint", "customer_id": "bigint", "amount": "double", "currency": "string",
                "status": "string", "created_at": "timestamp", "note": "string"}
"""The declared fields of bench/data.py's order event (its ``items`` array is left out)."""
POISON_EVERY = 1000


def spark_ddl() -> str:
    """The schema as Tidemark hands it to ``from_json`` (the baselines get exactly this string)."""
    return RecordFormat("json", tuple(parse_field_type(n, t) for n, t in VALUE_SCHEMA.items())).spark_ddl()


# --- the backlog ---------------------------------------------------------------------------------

def poison_lines(count: int, size: int) -> list[bytes]:
    """One line each (no newline inside): ``{not json``, or an order event cut in half."""
    rng = random.Random(7)
    return [b"{not json" if k % 2 == 0 else data.order_event(10**7 + k, size, rng)[:size // 2].encode()
            for k in range(count)]


def produce_poison(settings: BenchSettings, topic: str, lines: list[bytes]) -> None:
    """The poison, round robin over the partitions (kafka-python; a few thousand records at most)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=20)
    try:
        for k, line in enumerate(lines):
            producer.send(topic, value=line, partition=k % settings.partitions)
        producer.flush()
    finally:
        producer.close()


def produce_json(settings: BenchSettings, topic: str) -> dict:
    """BENCH_JSON_RECORDS good events in two halves (ProducerPerformance), the poison between them."""
    good, size = settings.records, settings.record_bytes
    lines = poison_lines(max(1, good // POISON_EVERY), size)
    data.create_topic(settings, topic, settings.partitions)
    started = time.perf_counter()
    first = data.produce(settings, topic, good // 2, size)
    produce_poison(settings, topic, lines)
    second = data.produce(settings, topic, good - good // 2, size, already=good // 2 + len(lines))
    seconds = time.perf_counter() - started
    total = good + len(lines)
    kinds = {"not_json": sum(1 for line in lines if line == b"{not json")}
    kinds["truncated_event"] = len(lines) - kinds["not_json"]
    return {"topic": topic, "records": total, "good": good, "poison": len(lines), "poison_kinds": kinds,
            "record_bytes": size, "bytes": good * size + sum(len(line) for line in lines),
            "partitions": len(second["records_per_partition"]),
            "records_per_partition": second["records_per_partition"],
            "producer": "ProducerPerformance (two halves, payloads from bench/data.py) + kafka-python (the poison)",
            "produce_seconds": round(seconds, 1),
            "producer_records_per_second": round((first["producer_records_per_second"]
                                                  + second["producer_records_per_second"]) / 2)}


def megabytes(backlog: dict) -> float:
    return backlog["bytes"] / 2**20


# --- checks --------------------------------------------------------------------------------------

FINGERPRINT = ("SELECT COUNT(*) AS rows, SUM(order_id) AS order_ids, SUM(customer_id) AS customer_ids, "
               "SUM(CAST(ROUND(amount * 100) AS BIGINT)) AS cents, COUNT(DISTINCT currency) AS currencies, "
               "COUNT(DISTINCT status) AS statuses, SUM(LENGTH(currency) + LENGTH(status) + LENGTH(note)) "
               "AS characters, CAST(MIN(created_at) AS VARCHAR) AS earliest, "
               "CAST(MAX(created_at) AS VARCHAR) AS latest FROM t WHERE order_id IS NOT NULL")


def fingerprint(uri: str) -> dict:
    """Sums over every parsed field of the good rows: equal only if the same values were parsed."""
    return localstack.query(uri, FINGERPRINT)[0]


def column_types(uri: str) -> dict[str, str]:
    from deltalake import DeltaTable

    return {f.name: str(f.type) for f in DeltaTable(uri).schema().fields}


def check_nulls(uri: str, backlog: dict, name: str) -> dict:
    """A baseline keeps every record: the poison as rows whose fields are all null."""
    found = localstack.query(uri, "SELECT COUNT(*) AS n, COUNT(order_id) AS good, COUNT(note) AS notes, "
                                  "COUNT(created_at) AS stamps FROM t")[0]
    expected = {"n": backlog["records"], "good": backlog["good"], "notes": backlog["good"], "stamps": backlog["good"]}
    if found != expected:
        raise RuntimeError(f"{name}: the output holds {found}, expected {expected}")
    return {"output_rows": found["n"], "null_rows": found["n"] - found["good"]}


# Log lines of the ingest job (tidemark.batch.execute, finalize) that end a phase of a JSON batch.
_PHASES = (("startup", r"batch \d+: reading \d+ offsets"),
           ("write_output_and_tally", r"batch \d+ committed to "),
           ("dead_letters", r"dead letters written to "),
           ("ledger_commit", r"batch \d+ committed in the ledger"))
_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO "


def ingest_phases(output: str, started: float, wall: float) -> dict[str, float]:
    """Seconds in each phase of the one-pass JSON path, from the job's log lines (``started``: the
    epoch time the process started): start-up (JVM, session, ledger check), the pass over Kafka that
    writes the good records while Spark tallies every record, the dead letters (the partitions that
    held bad records, read again), the ledger commit (with finalize's checks), and the shutdown."""
    phases, previous = {}, started
    for phase, pattern in _PHASES:
        match = re.search(_STAMP + r".*" + pattern, output, re.MULTILINE)
        if match:
            end = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            phases[phase] = round(end - previous, 2)
            previous = end
    phases["shutdown"] = round(started + wall - previous, 2)
    return phases


# --- the contenders ------------------------------------------------------------------------------

def tidemark_json(settings: BenchSettings, backlog: dict, rep: int) -> tuple[float, Measurement, dict]:
    config = stack.add_pipeline(settings, f"bench_json_{rep}", backlog["topic"], value_format="json",
                                value_schema=VALUE_SCHEMA)
    started = time.perf_counter()
    plan = prepare_batch(config, stack.kafka_properties(settings))
    plan_seconds = time.perf_counter() - started
    if plan.total_offsets != backlog["records"]:
        raise RuntimeError(f"Tidemark planned {plan.total_offsets} offsets, expected {backlog['records']}")
    began = time.time()
    measured = check(run_measured(stack.tidemark_submit(settings, plan), stack.spark_env(settings)),
                     "the Tidemark ingest job (JSON)")
    contenders.keep_log(settings, f"{TIDEMARK}-{rep}", measured)
    good = stack.table_count(config.table_uri)
    reasons = localstack.query(config.dead_letter_uri, "SELECT error, COUNT(*) AS n FROM t GROUP BY error")
    dead = sum(r["n"] for r in reasons)
    if good + dead != backlog["records"] or dead != backlog["poison"]:
        raise RuntimeError(f"{TIDEMARK}: {good} output rows and {dead} dead letters, expected "
                           f"{backlog['good']} and {backlog['poison']}")
    partitions = localstack.query(config.dead_letter_uri, "SELECT COUNT(DISTINCT kafka_partition) AS n FROM t")
    extra = {"plan_seconds": round(plan_seconds, 3), "submit_seconds": round(measured.wall_seconds, 3),
             "output_rows": good, "dead_letters": dead,
             "dead_letter_partitions": partitions[0]["n"],
             "dead_letter_reasons": {r["error"]: r["n"] for r in reasons},
             "phases": ingest_phases(measured.output, began, measured.wall_seconds),
             "fingerprint": fingerprint(config.table_uri), "column_types": column_types(config.table_uri)}
    stack.remove_pipeline(settings, config)
    return plan_seconds + measured.wall_seconds, measured, extra


def available_now_json(settings: BenchSettings, backlog: dict, rep: int) -> tuple[float, Measurement, dict]:
    table = stack.fresh_folder(settings.lake / f"bench_available_now_json_{rep}")
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / f"available_now_json_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-available-now-json-{rep}"),
               str(JOBS / "available_now_json.py"), "--topic", backlog["topic"], "--table", str(table),
               "--checkpoint", str(checkpoint), "--schema", spark_ddl()]
    measured = check(run_measured(command, stack.spark_env(settings)), "the AvailableNow job (JSON)")
    contenders.keep_log(settings, f"{AVAILABLE_NOW}-{rep}", measured)
    extra = {**check_nulls(str(table), backlog, AVAILABLE_NOW), "fingerprint": fingerprint(str(table)),
             "column_types": column_types(str(table))}
    stack.drop_table(str(table))
    stack.drop_table(str(checkpoint))
    return measured.wall_seconds, measured, extra


def plain_batch_json(settings: BenchSettings, backlog: dict, rep: int) -> tuple[float, Measurement, dict]:
    table = stack.fresh_folder(settings.lake / f"bench_plain_batch_json_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-plain-batch-json-{rep}"),
               str(JOBS / "plain_batch_json.py"), "--topic", backlog["topic"], "--table", str(table),
               "--schema", spark_ddl()]
    measured = check(run_measured(command, stack.spark_env(settings)), "the plain batch job (JSON)")
    contenders.keep_log(settings, f"{PLAIN_BATCH}-{rep}", measured)
    extra = {**check_nulls(str(table), backlog, PLAIN_BATCH), "fingerprint": fingerprint(str(table)),
             "column_types": column_types(str(table))}
    stack.drop_table(str(table))
    return measured.wall_seconds, measured, extra


def run_one(settings: BenchSettings, name: str, backlog: dict, rep: int) -> dict:
    runner = {TIDEMARK: tidemark_json, AVAILABLE_NOW: available_now_json, PLAIN_BATCH: plain_batch_json}[name]
    seconds, measured, extra = runner(settings, backlog, rep)
    timed = "plan call + spark-submit wall time" if name == TIDEMARK else "spark-submit wall time"
    return {"contender": name, "repetition": rep, "records": backlog["records"], "seconds": round(seconds, 3),
            "timed": timed, "records_per_second": round(backlog["records"] / seconds, 1),
            "mb_per_second": round(megabytes(backlog) / seconds, 2), **measured.summary(), **extra,
            **machine.load()}


# --- summary -------------------------------------------------------------------------------------

def summarize(runs: list[dict], backlog: dict) -> dict:
    pairs = ((TIDEMARK, AVAILABLE_NOW), (TIDEMARK, PLAIN_BATCH), (AVAILABLE_NOW, PLAIN_BATCH))
    summary = side.contender_summary(runs, {n: LABELS[n] for n in CONTENDERS}, backlog["records"], megabytes(backlog),
                                     {f"{a}/{b}": (a, b) for a, b in pairs})
    tidemark_runs = [r for r in runs if r["contender"] == TIDEMARK]
    if tidemark_runs:
        summary["tidemark_plan_seconds"] = round(statistics.median(r["plan_seconds"] for r in tidemark_runs), 3)
        phases = [p for p, _ in _PHASES] + ["shutdown"]
        summary["tidemark_phases"] = {
            p: round(statistics.median(r["phases"][p] for r in tidemark_runs if p in r["phases"]), 2)
            for p in phases if any(p in r["phases"] for r in tidemark_runs)}
    return summary


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[bench-json %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kafka", "py4j", "deltalake", "tidemark"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    base = BenchSettings.from_env()
    work = os.environ.get("BENCH_JSON_WORK", str(ROOT / ".cache" / "bench-json"))
    settings = dataclasses.replace(base, records=_int("BENCH_JSON_RECORDS", 1_000_000), work=Path(work))
    names = side.chosen("BENCH_JSON_CONTENDERS", CONTENDERS)
    stack.reset_work(settings)
    stack.configure_environment(settings)
    topic = f"bench_json_{uuid.uuid4().hex[:6]}"
    log.info("producing %d JSON order events of %d bytes and %d poison lines to %s (%d partitions)",
             settings.records, settings.record_bytes, max(1, settings.records // POISON_EVERY), topic,
             settings.partitions)
    backlog = produce_json(settings, topic)
    log.info("backlog ready in %.1f s: %d records, %d of them poison %s", backlog["produce_seconds"],
             backlog["records"], backlog["poison"], backlog["poison_kinds"])
    runs = []
    for rep in range(1, settings.repeats + 1):
        shift = (rep - 1) % len(names)
        for name in names[shift:] + names[:shift]:
            log.info("repetition %d/%d: %s ...", rep, settings.repeats, LABELS[name])
            row = run_one(settings, name, backlog, rep)
            runs.append(row)
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, peak RSS %.0f MB, load %.2f", rep,
                     settings.repeats, name, row["seconds"], row["records_per_second"], row["peak_tree_rss_mb"],
                     row["load_1m"])
    side.check_same_values(runs)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": machine.load(),
           "settings": {"records": backlog["records"], "good_records": settings.records,
                        "record_bytes": settings.record_bytes, "partitions": settings.partitions,
                        "repeats": settings.repeats, "master": settings.master,
                        "driver_memory": settings.driver_memory, "megabytes": round(megabytes(backlog), 1),
                        "contenders": list(names)},
           "value_schema": VALUE_SCHEMA, "spark_ddl": spark_ddl(), "backlog": backlog, "runs": runs,
           "summary": summarize(runs, backlog)}
    save_result("typed_json.json", out)
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
