"""`make bench-protobuf`: Protobuf against Avro on the same records (issue 40). The order records of `make
bench-avro` (bench/avro.py: BENCH_PROTOBUF_RECORDS, default 300,000, on BENCH_PARTITIONS=8 partitions, a few
thousand distinct values cycled, one in BENCH_POISON_EVERY=1,000 poison) are encoded twice, both in the
Confluent wire format with their schema registered in the Schema Registry at SCHEMA_REGISTRY_URL
(scripts/bench_protobuf.sh starts a private one): as Avro (``avro.ORDER_SCHEMA``, each value padded in its
``note`` to BENCH_RECORD_BYTES=300 bytes, as bench/avro.py does) and as Protobuf (``PROTO``: a flat proto3
message with the same seven fields, built from the decoded Avro values, so its ``note`` is the same and its
values a few bytes longer). The poison is the same records in both topics: every other one a wrong magic byte,
the others a truncated body. Both topics are filled by the same kafka-python producer loop.

Two Tidemark pipelines (``value_format: avro`` and ``protobuf``) ingest their topic as `tidemark run` does
(the plan call, which reads and freezes the schemas, then the ingest job's spark-submit), taking turns,
BENCH_REPEATS (3) rounds, timed from the plan call to the job's exit. After every run: the output and the dead
letters together hold every offset of the topic exactly once (by Kafka coordinates), the dead letters exactly
the poison, and the output's fingerprint (sums over every decoded field) and column types are those of every
earlier run, of either format; anything else fails the benchmark. Avro is decoded by ``from_avro`` in the JVM,
Protobuf by Tidemark's JVM UDF over protobuf-java (docs/DESIGN.md, *Decoding Protobuf*). Results:
bench/results/protobuf.json (protobuf_clean.json with BENCH_POISON_EVERY=0); ``--page`` writes the section and
the Targets row into docs/BENCHMARKS.md from the stored results.
"""

from __future__ import annotations

import datetime as dt
import importlib.resources
import io
import json
import logging
import random
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

from bench import avro, contenders, data, machine, page, stack
from bench.knobs import BenchSettings, _int, save_result
from bench.typed import POISON_EVERY, Backlog, check_same_values
from devkit import localstack

log = logging.getLogger("bench.protobuf")

PROTO = """syntax = "proto3";
package bench.protobuf;
import "google/protobuf/timestamp.proto";

message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; CANCELLED = 3; }
  int64 order_id = 1;
  string customer = 2;
  double amount = 3;
  Status status = 4;
  optional string coupon = 5;
  google.protobuf.Timestamp created_at = 6;
  string note = 7;
}
"""
AVRO, PROTOBUF = "tidemark_avro", "tidemark_protobuf"
TARGET = 0.95
"""Protobuf's throughput against Avro's on the same records (issue 60): decoded in the JVM, like from_avro."""
FORMATS = {AVRO: "avro", PROTOBUF: "protobuf"}
LABELS = {AVRO: "Tidemark, Avro values (`from_avro` in the JVM)",
          PROTOBUF: "Tidemark, Protobuf values (Tidemark's UDF over protobuf-java, in the JVM)"}
TITLE = "## Protobuf against Avro on the same records"
TARGET_PREFIX = "| Protobuf values"
PAYLOAD = tuple(f["name"] for f in avro.ORDER_SCHEMA["fields"])
PRODUCER = "kafka-python KafkaProducer (acks=1, linger 50 ms, 512 KiB batches)"


# --- the backlog -----------------------------------------------------------------------------------

def message_class(folder: Path):
    """``bench.protobuf.Order`` compiled from ``PROTO`` with protoc (grpc_tools, the well-known types on its path)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "order.proto").write_text(PROTO)
    include = importlib.resources.files("grpc_tools") / "_proto"
    out = folder / "order.pb"
    if protoc.main(["protoc", f"-I{folder}", f"-I{include}", f"--descriptor_set_out={out}", "--include_imports",
                    str(folder / "order.proto")]) != 0:
        raise RuntimeError(f"protoc refused {folder / 'order.proto'}")
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.protobuf.Order"))


def protobuf_value(schema_id: int, order_class, record: dict) -> bytes:
    """``record`` (as the Avro value holds it) as a Protobuf value in the Confluent wire format: magic byte,
    schema id, the message indexes of the file's first message (the single byte 0), the body."""
    message = order_class(order_id=record["order_id"], customer=record["customer"], amount=record["amount"],
                          status=order_class.Status.Value(record["status"]), note=record["note"])
    if record["coupon"] is not None:
        message.coupon = record["coupon"]
    message.created_at.FromDatetime(record["created_at"])
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + message.SerializeToString()


def distinct_values(settings: BenchSettings, avro_id: int, protobuf_id: int) -> tuple[list[bytes], list[bytes]]:
    """The Avro values of bench/avro.py (same seed, same padding), and each one's record read back and written as
    Protobuf: the same values, field by field."""
    from fastavro import parse_schema, schemaless_reader

    parsed = parse_schema(avro.ORDER_SCHEMA)
    order_class = message_class(settings.work / "proto")
    rng = random.Random(42)
    avro_values, protobuf_values = [], []
    for i in range(avro.DISTINCT_VALUES):
        value = avro.wire_value(avro_id, parsed, avro.order_record(i, rng), settings.record_bytes)
        record = schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        avro_values.append(value)
        protobuf_values.append(protobuf_value(protobuf_id, order_class, record))
    return avro_values, protobuf_values


def send(settings: BenchSettings, topic: str, values: list[bytes], schema_id: int, subject: str) -> dict:
    """BENCH_PROTOBUF_RECORDS values (``values`` cycled, record i poison as bench/avro.py's ``poison`` says),
    spread evenly over the partitions, sent by kafka-python; counted back from the topic's end offsets."""
    from kafka import KafkaProducer

    data.create_topic(settings, topic, settings.partitions)
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks=1, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=2 * 1024 * 1024, compression_type=None)
    kinds = {"magic_byte": 0, "truncated_body": 0}
    sent = 0
    started = time.perf_counter()
    try:
        for i in range(settings.records):
            good = values[i % len(values)]
            bad = avro.poison(i, good)
            if bad is not None:
                kinds["magic_byte" if bad[0] != 0 else "truncated_body"] += 1
            value = bad if bad is not None else good
            sent += len(value)
            producer.send(topic, value=value, partition=i % settings.partitions)
        producer.flush()
    finally:
        producer.close()
    seconds = time.perf_counter() - started
    offsets = data.end_offsets(settings, topic)
    if sum(offsets.values()) != settings.records:
        raise RuntimeError(f"topic {topic} holds {sum(offsets.values())} records, expected {settings.records}")
    lengths = [len(v) for v in values]
    return {"topic": topic, "records": settings.records, "record_bytes": settings.record_bytes, "bytes": sent,
            "mean_value_bytes": round(sent / settings.records, 1),
            "good_value_bytes": {"min": min(lengths), "max": max(lengths),
                                 "mean": round(statistics.fmean(lengths), 1)},
            "partitions": len(offsets), "records_per_partition": offsets, "distinct_values": len(values),
            "poison": sum(kinds.values()), "poison_kinds": kinds, "schema_id": schema_id, "subject": subject,
            "producer": PRODUCER, "produce_seconds": round(seconds, 1),
            "producer_records_per_second": round(settings.records / seconds)}


def register(subject: str, text: str, schema_type: str, url: str) -> int:
    import requests

    response = requests.post(f"{url}/subjects/{subject}/versions", timeout=10,
                             json={"schema": text, "schemaType": schema_type},
                             headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    response.raise_for_status()
    return int(response.json()["id"])


def produce(settings: BenchSettings, run: str) -> dict[str, Backlog]:
    """Two topics of the same records, ``bench_<format>_<run>``, their schemas registered under ``<topic>-value``."""
    registry = localstack.schema_registry_url()
    avro.require_registry(registry)
    topics = {name: f"bench_{fmt}_{run}" for name, fmt in FORMATS.items()}
    avro_id = register(f"{topics[AVRO]}-value", json.dumps(avro.ORDER_SCHEMA), "AVRO", registry)
    protobuf_id = register(f"{topics[PROTOBUF]}-value", PROTO, "PROTOBUF", registry)
    values = dict(zip((AVRO, PROTOBUF), distinct_values(settings, avro_id, protobuf_id), strict=True))
    ids = {AVRO: avro_id, PROTOBUF: protobuf_id}
    return {name: Backlog(send(settings, topics[name], values[name], ids[name], f"{topics[name]}-value"),
                          {"value_format": FORMATS[name]}, [], {}, registry_url=registry) for name in FORMATS}


# --- one run ---------------------------------------------------------------------------------------

def coordinates(uri: str | None):
    """The (partition, offset) columns of a Delta table as numpy arrays; empty when there is no table."""
    import numpy as np
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri).to_pyarrow_table(columns=["kafka_partition", "kafka_offset"])
    except TableNotFoundError:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return (table.column("kafka_partition").to_numpy().astype(np.int64),
            table.column("kafka_offset").to_numpy().astype(np.int64))


def check_exactly_once(name: str, config, backlog: Backlog) -> dict:
    """The output holds every good record and the dead letters every poison record, and together they hold each
    offset of the topic exactly once; else RuntimeError."""
    import numpy as np

    out_partitions, out_offsets = coordinates(config.table_uri)
    dead_partitions, dead_offsets = coordinates(config.dead_letter_uri)
    partitions = np.concatenate([out_partitions, dead_partitions])
    offsets = np.concatenate([out_offsets, dead_offsets])
    ends = backlog.facts["records_per_partition"]
    end = np.array([ends[p] for p in range(max(ends) + 1)], dtype=np.int64)
    in_range = bool(((partitions >= 0) & (partitions < end.size)).all())
    in_range = in_range and bool(((offsets >= 0) & (offsets < end[np.clip(partitions, 0, end.size - 1)])).all())
    distinct = int(np.unique(partitions * 2**40 + offsets).size)
    found = {"output_rows": int(out_offsets.size), "dead_letters": int(dead_offsets.size), "distinct": distinct,
             "in_range": in_range}
    expected = {"output_rows": backlog.records - backlog.poison, "dead_letters": backlog.poison,
                "distinct": backlog.records, "in_range": True}
    if found != expected:
        raise RuntimeError(f"{name}: the output and dead letters of pipeline '{config.name}' hold {found}, expected "
                           f"{expected}: not every record exactly once")
    return {"output_rows": found["output_rows"], "dead_letters": found["dead_letters"]}


def run_one(settings: BenchSettings, name: str, backlog: Backlog, rep: int) -> dict:
    from deltalake import DeltaTable

    key = FORMATS[name]
    config = stack.add_pipeline(settings, f"bench_{key}_{rep}", backlog.facts["topic"], **backlog.pipeline)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=backlog.records, registry_url=backlog.registry_url)
    began = time.time()
    measured = stack.run_ingest(settings, plan, f"the Tidemark ingest job ({key})")
    contenders.keep_log(settings, f"{name}-{rep}", measured)
    counted = check_exactly_once(name, config, backlog)
    reasons = localstack.query_or_none(config.dead_letter_uri, "SELECT error, COUNT(*) AS n FROM t GROUP BY error")
    facts = {"fingerprint": localstack.query(config.table_uri, avro.FINGERPRINT)[0],
             "column_types": {f.name: str(f.type) for f in DeltaTable(config.table_uri).schema().fields
                              if f.name in PAYLOAD},
             "dead_letter_reasons": {re.sub(r"\d+", "N", r["error"]): r["n"] for r in reasons or []}}
    stack.remove_pipeline(settings, config)
    seconds = plan_seconds + measured.wall_seconds
    return {"contender": name, "repetition": rep, "records": backlog.records, "seconds": round(seconds, 3),
            "timed": "plan call + spark-submit wall time", "records_per_second": round(backlog.records / seconds, 1),
            "mb_per_second": round(backlog.megabytes / seconds, 2), "plan_seconds": round(plan_seconds, 3),
            "phases": contenders.ingest_phases(measured.output, began, measured.wall_seconds, contenders.TYPED_PHASES),
            **counted, **facts, **measured.summary(), **machine.load()}


# --- summary and page --------------------------------------------------------------------------------

def summarize(runs: list[dict], backlogs: dict[str, Backlog]) -> dict:
    contenders_ = {}
    for name, label in LABELS.items():
        mine = [r for r in runs if r["contender"] == name]
        median = statistics.median(r["seconds"] for r in mine)
        contenders_[name] = {
            "label": label, "runs": len(mine), "median_seconds": round(median, 2),
            "min_seconds": round(min(r["seconds"] for r in mine), 2),
            "max_seconds": round(max(r["seconds"] for r in mine), 2),
            "median_records_per_second": round(backlogs[name].records / median),
            "median_mb_per_second": round(backlogs[name].megabytes / median, 2),
            "mean_value_bytes": backlogs[name].facts["mean_value_bytes"],
            "median_tree_cpu_seconds": round(statistics.median(r["tree_cpu_seconds"] for r in mine), 1),
            "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine)),
            "median_plan_seconds": round(statistics.median(r["plan_seconds"] for r in mine), 3),
            "phases": {p: round(statistics.median(r["phases"][p] for r in mine if p in r["phases"]), 2)
                       for p in [p for p, _ in contenders.TYPED_PHASES] + ["shutdown"]
                       if any(p in r["phases"] for r in mine)}}
    rps = {n: c["median_records_per_second"] for n, c in contenders_.items()}
    return {"contenders": contenders_, "ratio": round(rps[PROTOBUF] / rps[AVRO], 3),
            "cpu_ratio": round(contenders_[PROTOBUF]["median_tree_cpu_seconds"] /
                               contenders_[AVRO]["median_tree_cpu_seconds"], 3),
            "same_values": True, "fingerprint": runs[0]["fingerprint"], "column_types": runs[0]["column_types"]}


def section(out: dict) -> str:
    """The part's section of docs/BENCHMARKS.md, from its results."""
    s, m, c = out["settings"], out["summary"], out["summary"]["contenders"]
    loads = [r["load_1m"] for r in out["runs"]]
    poison = (f"one record in {s['poison_every']:,} poison in both (every other one a wrong magic byte, the "
              f"others a truncated body)" if s["poison_every"] else "no poison")
    a, b = c[AVRO], c[PROTOBUF]
    overlap = a["min_seconds"] <= b["max_seconds"] and b["min_seconds"] <= a["max_seconds"]
    noise = (" The two ranges of seconds overlap: at this load the difference between the medians is within the "
             "run-to-run noise, and the CPU time of the process tree, which the load moves less, is the steadier "
             "comparison." if overlap else "")
    write = "write_output_and_tally"
    phase = (f" In the output write alone (the one pass over Kafka, where the values are decoded) Protobuf took "
             f"{b['phases'][write]} s against Avro's {a['phases'][write]} s ("
             f"{a['phases'][write] / b['phases'][write]:.2f}x Avro's rate)." if write in a["phases"] and
             write in b["phases"] else "")
    rows = "".join(
        f"| {c[n]['label']} | {c[n]['median_records_per_second']:,} | {c[n]['median_mb_per_second']} | "
        f"{c[n]['median_seconds']} ({c[n]['min_seconds']}-{c[n]['max_seconds']}) | {c[n]['mean_value_bytes']} | "
        f"{c[n]['median_tree_cpu_seconds']} | {c[n]['median_peak_tree_rss_mb']:,} |\n" for n in LABELS)
    return (
        f"{TITLE}\n\n`make bench-protobuf` ({out['date']}; bench/results/protobuf.json): {s['records']:,} order "
        f"records (the 7 fields of `make bench-avro`: long, string, double, enum, nullable string, timestamp, a "
        f"padding string) on {s['partitions']} partitions, {poison}, encoded once as Avro (padded to "
        f"{s['record_bytes']} bytes, as bench/avro.py does) and once as Protobuf (a flat proto3 message with the "
        f"same fields, built from the decoded Avro values), both in the Confluent wire format with their schemas "
        f"registered in a private Schema Registry. Two pipelines (`value_format: avro`, `value_format: protobuf`) "
        f"ingest them as `tidemark run` does, taking turns, {s['repeats']} rounds (plan call + spark-submit on "
        f"`{s['master']}`, medians, range in brackets). After every run the output and the dead letters held "
        f"each offset exactly once, and every output the same values (fingerprint "
        f"`{json.dumps(m['fingerprint'])}`, the same column types). This is a smaller backlog than "
        f"`make bench-avro`'s 1,000,000 records, so the fixed costs (the JVM's start, the first tasks' warm-up, the "
        f"Delta commits) weigh more in both and draw the ratio towards 1; the absolute rates are not comparable "
        f"with that section's.\n\n"
        f"| pipeline | records/s | MB/s | seconds | bytes a value | CPU s (process tree) | peak RSS, MB |\n"
        f"|---|---|---|---|---|---|---|\n{rows}\n"
        f"Protobuf ran at {m['ratio']}x Avro's throughput (records/s, medians) and took {m['cpu_ratio']}x its CPU "
        f"time.{phase}{noise} Avro is decoded by Spark's `from_avro` in the JVM; Protobuf by Tidemark's own "
        f"UDF over protobuf-java's dynamic messages, also in the JVM (`jvm/protobuf`; "
        f"`tidemark.batch.spark.protobuf_udf.decoded`), because `from_protobuf`'s jar (`spark-protobuf_2.13`) is "
        f"not on Maven Central as reachable here (docs/DESIGN.md, *Decoding Protobuf*). Median phases (s): "
        f"Avro {c[AVRO]['phases']}, "
        f"Protobuf {c[PROTOBUF]['phases']}. The 1-minute load during the runs was {min(loads):.2f}-"
        f"{max(loads):.2f} on {out['machine'].get('cores', 2)} cores (this benchmark's own processes included; a "
        f"shared machine).\n")


def targets(out: dict) -> list[dict]:
    m, c, s = out["summary"], out["summary"]["contenders"], out["settings"]
    poison = f"{100 / s['poison_every']:g}% poison" if s["poison_every"] else "no poison"
    met = m.get("same_values") is True and all(c[n]["runs"] == s["repeats"] for n in LABELS)
    return [{"target": f"Protobuf values, {poison}: >= {TARGET}x Avro's throughput on the same {s['records']:,} "
                       f"records, both outputs holding the same values ({out['date']})",
             "measured": f"{m['ratio']}x ({c[PROTOBUF]['median_records_per_second']:,} vs "
                         f"{c[AVRO]['median_records_per_second']:,} records/s); same values in every run",
             "met": met and m["ratio"] >= TARGET}]


def write_page() -> None:
    page.write_stored("protobuf.json", "Protobuf", TITLE, section, TARGET_PREFIX, targets)


def main() -> None:
    if "--page" in sys.argv[1:]:
        write_page()
        return
    stack.log_as("bench-protobuf")
    settings = stack.own_settings("protobuf", records=_int("BENCH_PROTOBUF_RECORDS", 300_000))
    stack.reset_work(settings)
    stack.configure_environment(settings)
    stack.train_class_data(settings)
    backlogs = produce(settings, uuid.uuid4().hex[:6])
    for name, backlog in backlogs.items():
        log.info("%s backlog ready in %.1f s: %d records of %.1f bytes on average, %d of them poison %s", name,
                 backlog.facts["produce_seconds"], backlog.records, backlog.facts["mean_value_bytes"], backlog.poison,
                 backlog.facts["poison_kinds"])
    runs: list[dict] = []
    for rep in range(1, settings.repeats + 1):
        for name in ((AVRO, PROTOBUF) if rep % 2 else (PROTOBUF, AVRO)):
            runs.append(row := run_one(settings, name, backlogs[name], rep))
            check_same_values(runs)  # fails loudly the moment one output's values differ from the first's
            log.info("repetition %d/%d: %s: %.1f s, %.0f records/s, CPU %.1f s, load %.2f", rep, settings.repeats,
                     name, row["seconds"], row["records_per_second"], row["tree_cpu_seconds"], row["load_1m"])
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_end": machine.load(),
           "settings": {"records": settings.records, "record_bytes": settings.record_bytes,
                        "partitions": settings.partitions, "repeats": settings.repeats, "master": settings.master,
                        "driver_memory": settings.driver_memory, "poison_every": POISON_EVERY},
           "proto": PROTO, "avro_schema": avro.ORDER_SCHEMA,
           "backlogs": {name: b.facts for name, b in backlogs.items()}, "runs": runs,
           "summary": summarize(runs, backlogs)}
    save_result("protobuf.json" if POISON_EVERY else "protobuf_clean.json", out)
    print(json.dumps(out["summary"], indent=2, default=str))


if __name__ == "__main__":
    main()
