"""`make bench-avro`: Avro values in the Confluent wire format, read into typed columns of a Delta
table by Tidemark and by the baselines, all decoding the same schema from the same Schema Registry.

The backlog (BENCH_AVRO_RECORDS, default 1,000,000 order records of about BENCH_RECORD_BYTES=300
bytes each on BENCH_PARTITIONS=8 partitions) is one schema version (7 fields: long, string, double,
enum, nullable string, timestamp-millis, a padding string) registered under `<topic>-value` in the
registry at SCHEMA_REGISTRY_URL (scripts/bench_avro.sh starts one); a few thousand distinct values
are encoded with fastavro and sent by kafka-python (its time is recorded, not compared). One record
in 1,000 is poison (every other one a wrong magic byte, the others a truncated body), so Tidemark's
dead-letter path runs. The contenders, interleaved, BENCH_REPEATS times (default 3), each on
BENCH_SPARK_MASTER (local[2]) with the same spark-submit base:

- tidemark_avro: the `tidemark run` path (the plan call, which reads and freezes the schemas, then
  the ingest job's spark-submit): `from_avro` per schema id, every bad record a dead letter;
- available_now_avro: Structured Streaming, Trigger.AvailableNow, `from_avro` (PERMISSIVE) on the
  body after the header, the poison kept as rows of nulls (bench/jobs/available_now_avro.py);
- from_avro_batch and fastavro_batch: the decoder comparison, one plain Spark batch read each (no
  checkpoint, no bookkeeping), decoding with Spark's `from_avro` or with fastavro's
  `schemaless_reader` in `mapInArrow` (bench/jobs/fastavro_batch.py).

BENCH_AVRO_CONTENDERS (comma-separated) runs some of them only. Every output is counted back and
fingerprinted (sums over the decoded fields), so all of them must have decoded the same values.
Work folder: BENCH_AVRO_WORK (.cache/bench-avro). Results: bench/results/avro.json.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
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
from tidemark.schema_registry import RegistryClient

log = logging.getLogger("bench")
JOBS = ROOT / "bench" / "jobs"

TIDEMARK = "tidemark_avro"
AVAILABLE_NOW = "available_now_avro"
FROM_AVRO_BATCH = "from_avro_batch"
FASTAVRO_BATCH = "fastavro_batch"
CONTENDERS = (TIDEMARK, AVAILABLE_NOW, FROM_AVRO_BATCH, FASTAVRO_BATCH)
LABELS = {
    TIDEMARK: "Tidemark ingest job (plan with the registry + spark-submit), from_avro",
    AVAILABLE_NOW: "Structured Streaming AvailableNow, from_avro (PERMISSIVE)",
    FROM_AVRO_BATCH: "Plain Spark batch read, from_avro (PERMISSIVE)",
    FASTAVRO_BATCH: "Plain Spark batch read, fastavro in mapInArrow",
}

ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "bench.avro", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
    {"name": "coupon", "type": ["null", "string"], "default": None},
    {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": "string"},
]}
DISTINCT_VALUES = 4096
POISON_EVERY = 1000
"""Record i is poison when i % 1000 == 999: a wrong magic byte when i % 2000 == 999, else a truncated body."""


# --- the backlog ---------------------------------------------------------------------------------

def order_record(i: int, rng: random.Random) -> dict:
    return {"order_id": 10**9 + i, "customer": f"customer-{rng.randrange(10**6):06d}",
            "amount": rng.randrange(100, 50000) / 100, "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
            "coupon": rng.choice([None, None, f"SAVE{rng.randrange(5, 50)}"]),
            "created_at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=37 * i), "note": ""}


def wire_value(schema_id: int, parsed: dict, record: dict, size: int) -> bytes:
    """``record`` in the Confluent wire format, its ``note`` padded so the value is ``size`` bytes."""
    from fastavro import schemaless_writer

    def encode(rec: dict) -> bytes:
        body = io.BytesIO()
        schemaless_writer(body, parsed, rec)
        return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()

    value = encode(record)
    if len(value) > size:
        raise ValueError(f"BENCH_RECORD_BYTES={size} is too small for an Avro order record ({len(value)} bytes)")
    note = "x" * (size - len(value))
    while len(value := encode({**record, "note": note})) != size:  # the length prefix of the string grew
        note = note[:len(note) - (len(value) - size)]
    return value


def poison(i: int, good: bytes) -> bytes | None:
    if i % POISON_EVERY != POISON_EVERY - 1:
        return None
    if i % (2 * POISON_EVERY) == POISON_EVERY - 1:
        return b"\x01" + good[1:]  # not the Confluent wire format
    return good[:5 + 12]  # the header, then a body cut short


def produce_avro(settings: BenchSettings, topic: str, schema_id: int) -> dict:
    """BENCH_AVRO_RECORDS values, spread evenly over the partitions, sent by kafka-python."""
    from fastavro import parse_schema
    from kafka import KafkaProducer

    parsed = parse_schema(ORDER_SCHEMA)
    rng = random.Random(42)
    values = [wire_value(schema_id, parsed, order_record(i, rng), settings.record_bytes)
              for i in range(DISTINCT_VALUES)]
    data.create_topic(settings, topic, settings.partitions)
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=2 * 1024 * 1024, compression_type=None)
    kinds = {"magic_byte": 0, "truncated_body": 0}
    started = time.perf_counter()
    try:
        for i in range(settings.records):
            good = values[i % DISTINCT_VALUES]
            bad = poison(i, good)
            if bad is not None:
                kinds["magic_byte" if bad[0] != 0 else "truncated_body"] += 1
            producer.send(topic, value=bad if bad is not None else good, partition=i % settings.partitions)
        producer.flush()
    finally:
        producer.close()
    seconds = time.perf_counter() - started
    offsets = data.end_offsets(settings, topic)
    if sum(offsets.values()) != settings.records:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values())} records, expected {settings.records}")
    return {"topic": topic, "records": settings.records, "record_bytes": settings.record_bytes,
            "partitions": len(offsets), "records_per_partition": offsets, "distinct_values": DISTINCT_VALUES,
            "poison": sum(kinds.values()), "poison_kinds": kinds, "schema_id": schema_id,
            "subject": f"{topic}-value",
            "producer": "kafka-python KafkaProducer (acks=1, linger 50 ms, 512 KiB batches)",
            "produce_seconds": round(seconds, 1), "producer_records_per_second": round(settings.records / seconds)}


# --- checks --------------------------------------------------------------------------------------

FINGERPRINT = ("SELECT COUNT(*) AS rows, SUM(order_id) AS order_ids, SUM(CAST(ROUND(amount * 100) AS BIGINT)) "
               "AS cents, COUNT(coupon) AS coupons, COUNT(DISTINCT status) AS statuses, "
               "SUM(LENGTH(customer) + LENGTH(note)) AS characters, CAST(MAX(created_at) AS VARCHAR) AS latest "
               "FROM t WHERE order_id IS NOT NULL")


def fingerprint(uri: str) -> dict:
    """Sums over every decoded field of the good rows: equal only if the same values were decoded."""
    return localstack.query(uri, FINGERPRINT)[0]


def column_types(uri: str) -> dict[str, str]:
    from deltalake import DeltaTable

    return {f.name: str(f.type) for f in DeltaTable(uri).schema().fields}


def check_nulls(uri: str, backlog: dict, name: str) -> dict:
    """A baseline keeps every record: the poison as rows whose fields are all null."""
    found = localstack.query(uri, "SELECT COUNT(*) AS n, COUNT(order_id) AS good, COUNT(note) AS notes FROM t")[0]
    expected = {"n": backlog["records"], "good": backlog["records"] - backlog["poison"],
                "notes": backlog["records"] - backlog["poison"]}
    if found != expected:
        raise RuntimeError(f"{name}: the output holds {found}, expected {expected}")
    return {"output_rows": found["n"], "null_rows": found["n"] - found["good"]}


# --- the contenders ------------------------------------------------------------------------------

def tidemark_avro(settings: BenchSettings, backlog: dict, registry: str, rep: int) -> tuple[float, Measurement, dict]:
    config = stack.add_pipeline(settings, f"bench_avro_{rep}", backlog["topic"], value_format="avro")
    started = time.perf_counter()
    plan = prepare_batch(config, stack.kafka_properties(settings), schemas=RegistryClient(registry))
    plan_seconds = time.perf_counter() - started
    if plan.total_offsets != backlog["records"]:
        raise RuntimeError(f"Tidemark planned {plan.total_offsets} offsets, expected {backlog['records']}")
    began = time.time()
    measured = check(run_measured(stack.tidemark_submit(settings, plan), stack.spark_env(settings)),
                     "the Tidemark ingest job (Avro)")
    contenders.keep_log(settings, f"{TIDEMARK}-{rep}", measured)
    good = stack.table_count(config.table_uri)
    reasons = localstack.query(config.dead_letter_uri, "SELECT error, COUNT(*) AS n FROM t GROUP BY error")
    dead = sum(r["n"] for r in reasons)
    if good != backlog["records"] - backlog["poison"] or dead != backlog["poison"]:
        raise RuntimeError(f"{TIDEMARK}: {good} output rows and {dead} dead letters, expected "
                           f"{backlog['records'] - backlog['poison']} and {backlog['poison']}")
    extra = {"plan_seconds": round(plan_seconds, 3), "submit_seconds": round(measured.wall_seconds, 3),
             "output_rows": good, "dead_letters": dead,
             "dead_letter_reasons": {_reason(r["error"]): r["n"] for r in reasons},
             "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds),
             "fingerprint": fingerprint(config.table_uri), "column_types": column_types(config.table_uri)}
    stack.remove_pipeline(settings, config)
    return plan_seconds + measured.wall_seconds, measured, extra


def _reason(error: str) -> str:
    """A dead letter's reason with its numbers (schema id, size) as N: one key per kind."""
    return re.sub(r"\d+", "N", error)


def available_now_avro(settings: BenchSettings, backlog: dict, files: dict[str, Path],
                       rep: int) -> tuple[float, Measurement, dict]:
    table = stack.fresh_folder(settings.lake / f"bench_available_now_avro_{rep}")
    checkpoint = stack.fresh_folder(settings.work / "checkpoints" / f"available_now_avro_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-available-now-avro-{rep}"),
               str(JOBS / "available_now_avro.py"), "--topic", backlog["topic"], "--table", str(table),
               "--checkpoint", str(checkpoint), "--schema-file", str(files["schema"])]
    measured = check(run_measured(command, stack.spark_env(settings)), "the AvailableNow job (Avro)")
    contenders.keep_log(settings, f"{AVAILABLE_NOW}-{rep}", measured)
    extra = {**check_nulls(str(table), backlog, AVAILABLE_NOW), "fingerprint": fingerprint(str(table)),
             "column_types": column_types(str(table))}
    stack.drop_table(str(table))
    stack.drop_table(str(checkpoint))
    return measured.wall_seconds, measured, extra


def avro_batch(settings: BenchSettings, backlog: dict, files: dict[str, Path], rep: int,
               decoder: str) -> tuple[float, Measurement, dict]:
    name = FASTAVRO_BATCH if decoder == "fastavro" else FROM_AVRO_BATCH
    table = stack.fresh_folder(settings.lake / f"bench_{name}_{rep}")
    command = [*stack.spark_submit_base(settings, f"bench-{name.replace('_', '-')}-{rep}"),
               str(JOBS / "fastavro_batch.py"), "--topic", backlog["topic"], "--table", str(table),
               "--schemas-file", str(files["writers"]), "--decoder", decoder]
    measured = check(run_measured(command, stack.spark_env(settings)), f"the {name} job")
    contenders.keep_log(settings, f"{name}-{rep}", measured)
    extra = {**check_nulls(str(table), backlog, name), "fingerprint": fingerprint(str(table)),
             "column_types": column_types(str(table))}
    stack.drop_table(str(table))
    return measured.wall_seconds, measured, extra


def run_one(settings: BenchSettings, name: str, backlog: dict, registry: str, files: dict[str, Path],
            rep: int) -> dict:
    if name == TIDEMARK:
        seconds, measured, extra = tidemark_avro(settings, backlog, registry, rep)
        timed = "plan call + spark-submit wall time"
    elif name == AVAILABLE_NOW:
        seconds, measured, extra = available_now_avro(settings, backlog, files, rep)
        timed = "spark-submit wall time"
    else:
        seconds, measured, extra = avro_batch(settings, backlog, files, rep,
                                              "fastavro" if name == FASTAVRO_BATCH else "from_avro")
        timed = "spark-submit wall time"
    return {"contender": name, "repetition": rep, "records": backlog["records"], "seconds": round(seconds, 3),
            "timed": timed, "records_per_second": round(backlog["records"] / seconds, 1),
            "mb_per_second": round(settings.megabytes / seconds, 2), **measured.summary(), **extra, **machine.load()}


# --- summary -------------------------------------------------------------------------------------

def summarize(runs: list[dict], settings: BenchSettings) -> dict:
    summary = side.contender_summary(runs, {n: LABELS[n] for n in CONTENDERS}, settings.records, settings.megabytes, {
        "tidemark_avro/available_now_avro": (TIDEMARK, AVAILABLE_NOW),
        "fastavro_batch/from_avro_batch": (FASTAVRO_BATCH, FROM_AVRO_BATCH),
        "tidemark_avro/from_avro_batch": (TIDEMARK, FROM_AVRO_BATCH)})
    tidemark_runs = [r for r in runs if r["contender"] == TIDEMARK]
    if tidemark_runs:
        summary["tidemark_plan_seconds"] = round(statistics.median(r["plan_seconds"] for r in tidemark_runs), 3)
    return summary


def require_registry(url: str) -> None:
    import requests

    try:
        requests.get(f"{url}/subjects", timeout=10).raise_for_status()
    except requests.RequestException as exc:
        raise SystemExit(f"the Schema Registry at {url} does not answer ({type(exc).__name__}); "
                         "`make bench-avro` starts one (scripts/bench_avro.sh)") from None


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[bench-avro %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    for noisy in ("kafka", "py4j", "deltalake", "tidemark"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    base = BenchSettings.from_env()
    work = Path(os.environ.get("BENCH_AVRO_WORK", str(ROOT / ".cache" / "bench-avro")))
    settings = dataclasses.replace(base, records=_int("BENCH_AVRO_RECORDS", 1_000_000), work=work)
    names = side.chosen("BENCH_AVRO_CONTENDERS", CONTENDERS)
    registry = localstack.schema_registry_url()
    require_registry(registry)
    stack.reset_work(settings)
    stack.configure_environment(settings)
    topic = f"bench_avro_{uuid.uuid4().hex[:6]}"
    schema_id = localstack.register_schema(f"{topic}-value", ORDER_SCHEMA, registry)
    files = {"schema": settings.work / "order.avsc", "writers": settings.work / "writers.json"}
    files["schema"].write_text(json.dumps(ORDER_SCHEMA))
    files["writers"].write_text(json.dumps({str(schema_id): json.dumps(ORDER_SCHEMA)}))
    log.info("producing %d Avro records of %d bytes to %s (%d partitions; schema id %d at %s)", settings.records,
             settings.record_bytes, topic, settings.partitions, schema_id, registry)
    backlog = produce_avro(settings, topic, schema_id)
    log.info("backlog ready in %.1f s: %s poison records %s", backlog["produce_seconds"], backlog["poison"],
             backlog["poison_kinds"])
    runs = []
    for rep in range(1, settings.repeats + 1):
        shift = (rep - 1) % len(names)
        for name in names[shift:] + names[:shift]:
            log.info("repetition %d/%d: %s ...", rep, settings.repeats, LABELS[name])
            row = run_one(settings, name, backlog, registry, files, rep)
            runs.append(row)
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, peak RSS %.0f MB, load %.2f", rep,
                     settings.repeats, name, row["seconds"], row["records_per_second"], row["peak_tree_rss_mb"],
                     row["load_1m"])
    side.check_same_values(runs)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": machine.load(),
           "settings": {"records": settings.records, "record_bytes": settings.record_bytes,
                        "partitions": settings.partitions, "repeats": settings.repeats, "master": settings.master,
                        "driver_memory": settings.driver_memory, "megabytes": round(settings.megabytes, 1),
                        "contenders": list(names)},
           "schema": ORDER_SCHEMA, "backlog": backlog, "runs": runs, "summary": summarize(runs, settings)}
    save_result("avro.json", out)
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
