"""`make bench-tls`: what TLS costs a user. The raw Tidemark ingest job (the plan call, then exactly the
spark-submit of `tidemark run`) over the SASL_SSL listener (SCRAM-SHA-512, the CA as a path) against the
same job over PLAINTEXT, on the same three-broker cluster (scripts/kafka_cluster.sh, started by
scripts/bench_tls.sh), in one run.

One backlog of BENCH_TLS_RECORDS (1,000,000) events of BENCH_RECORD_BYTES (300) on BENCH_PARTITIONS (8)
partitions, replication factor 3, produced once over PLAINTEXT; each repetition (BENCH_REPEATS, 3) reads
all of it into a fresh pipeline once per listener, alternating which goes first. The job's Kafka
properties are the listener's (the connection the plan resolves and the job's TIDEMARK_KAFKA_PROPERTIES).
Every output is counted back. Results: bench/results/tls.json.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import statistics
import subprocess
import uuid

from bench import data, machine, stack
from bench.knobs import ROOT, BenchSettings, save_result
from bench.measure import check, run_measured
from tidemark.batch.job_settings import KAFKA_ENV_VAR

log = logging.getLogger("bench")
CLUSTER = str(ROOT / "scripts" / "kafka_cluster.sh")
PLAINTEXT, SASL_SSL = "plaintext", "sasl_ssl"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def cluster(*args: str) -> str:
    return subprocess.run([CLUSTER, *args], check=True, capture_output=True, text=True).stdout.strip()


def listener_properties() -> dict[str, dict[str, str]]:
    """The Kafka connection's extra for each listener of the running cluster."""
    password = open(cluster("pem", "sasl-password"), encoding="ascii").read().strip()
    return {PLAINTEXT: {"bootstrap.servers": cluster("bootstrap", PLAINTEXT)},
            SASL_SSL: {"bootstrap.servers": cluster("bootstrap", SASL_SSL), "security.protocol": "SASL_SSL",
                       "sasl.mechanism": "SCRAM-SHA-512",
                       "sasl.jaas.config": f'{SCRAM} required username="tidemark" password="{password}";',
                       "ssl.cafile": cluster("pem", "ca")}}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 3)])
    finally:
        admin.close()


def run_job(settings: BenchSettings, topic: str, records: int, kind: str, properties: dict, rep: int) -> dict:
    """The plan call and the ingest job of a fresh pipeline over one listener, counted back."""
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": properties})
    config = stack.add_pipeline(settings, f"bench_tls_{kind}_{rep}", topic)
    plan, plan_seconds = stack.plan_batch(settings, config, expect=records)
    command, env = stack.ingest_command(settings, plan)
    env[KAFKA_ENV_VAR] = json.dumps(properties)
    measured = check(run_measured(command, env), f"the Tidemark ingest job over {kind} (repetition {rep})")
    found = stack.table_count(config.table_uri)
    if found != records:
        raise RuntimeError(f"pipeline {config.name} over {kind}: the output holds {found} rows, expected {records}")
    stack.remove_pipeline(settings, config)
    seconds = plan_seconds + measured.wall_seconds
    log.info("%s, repetition %d: %d records in %.1f s (plan %.2f s)", kind, rep, records, seconds, plan_seconds)
    return {"listener": kind, "repetition": rep, "plan_seconds": round(plan_seconds, 3), "seconds": round(seconds, 3),
            "records_per_second": round(records / seconds, 1), **measured.summary()}


def summarize(runs: list[dict], records: int) -> dict:
    out = {}
    for kind in (PLAINTEXT, SASL_SSL):
        mine = [r for r in runs if r["listener"] == kind]
        out[kind] = {"median_seconds": round(statistics.median(r["seconds"] for r in mine), 1),
                     "min_seconds": round(min(r["seconds"] for r in mine), 1),
                     "max_seconds": round(max(r["seconds"] for r in mine), 1), "runs": len(mine),
                     "median_records_per_second": round(records / statistics.median(r["seconds"] for r in mine)),
                     "median_plan_seconds": round(statistics.median(r["plan_seconds"] for r in mine), 2),
                     "median_tree_cpu_seconds": round(statistics.median(r["tree_cpu_seconds"] for r in mine), 1),
                     "median_peak_tree_rss_mb": round(statistics.median(r["peak_tree_rss_mb"] for r in mine))}
    out["sasl_ssl_over_plaintext"] = round(out[SASL_SSL]["median_seconds"] / out[PLAINTEXT]["median_seconds"], 2)
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    settings = BenchSettings.from_env()
    records = int(os.environ.get("BENCH_TLS_RECORDS", "1000000").replace("_", "").replace(",", ""))
    stack.reset_work(settings)
    stack.configure_environment(settings)
    listeners = listener_properties()
    topic = f"bench_tls_{uuid.uuid4().hex[:6]}"
    create_topic(listeners[PLAINTEXT]["bootstrap.servers"], topic, settings.partitions)
    load_at_start = machine.load()
    backlog = data.produce(settings, topic, records, settings.record_bytes)
    runs = []
    for rep in range(1, settings.repeats + 1):
        order = (PLAINTEXT, SASL_SSL) if rep % 2 else (SASL_SSL, PLAINTEXT)
        runs += [run_job(settings, topic, records, kind, listeners[kind], rep) for kind in order]
    summary = summarize(runs, records)
    out = {"date": dt.date.today().isoformat(), "machine": machine.describe(), "load_at_start": load_at_start,
           "load_at_end": machine.load(), "master": settings.master, "brokers": 3, "replication_factor": 3,
           "records": records, "record_bytes": settings.record_bytes, "partitions": settings.partitions,
           "producer_records_per_second": backlog["producer_records_per_second"],
           "listeners": {kind: {k: v for k, v in props.items() if k != "sasl.jaas.config"}
                         for kind, props in listeners.items()},
           "runs": runs, "summary": summary}
    save_result("tls.json", out)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
