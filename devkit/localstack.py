"""The local stack's data tools: topics and records on the local broker (scripts/kafka.sh), SQL over Delta
tables with delta-rs, and the environment of a Tidemark process pointed at them. Used by the tests
(through tests/helpers.py) and the soak (scripts/soak.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections import Counter

import pyarrow as pa

S3_BUCKET = "lake"
S3_ACCESS_KEY, S3_SECRET_KEY = "tidemark", "tidemark-local"  # scripts/storage.sh's local values


def s3_endpoint() -> str:
    """The local S3 server (scripts/storage.sh) of this run: 127.0.0.1:$S3_PORT."""
    return f"http://127.0.0.1:{os.environ.get('S3_PORT', '9000')}"


def aws_connection(secret: str = S3_SECRET_KEY) -> str:
    """An ``aws`` Airflow connection (JSON) to the local S3 server. The server accepts any secret, so
    a test can plant a canary one and look for it where it must not appear."""
    return json.dumps({"conn_type": "aws", "login": S3_ACCESS_KEY, "password": secret,
                       "extra": {"endpoint_url": s3_endpoint(), "region_name": "us-east-1"}})


def s3_lake(name: str) -> str:
    """A fresh lake root on the local S3 server, under the bucket ``lake``."""
    return f"s3a://{S3_BUCKET}/tests/{name}-{uuid.uuid4().hex[:8]}"


def connect_conf() -> str:
    """The Spark Connect server's settings for a lake on the local S3 server (CONNECT_CONF of
    scripts/connect.sh): S3A, its endpoint and Tidemark's log store, as ``key=value`` words. The keys
    stay out of it: S3A reads them from the server's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."""
    from tidemark.storage import ObjectStore, spark_conf

    conf = spark_conf(ObjectStore(endpoint_url=s3_endpoint()), secrets=False)
    return " ".join(f"{key}={value}" for key, value in sorted(conf.items()))


def _table(table_uri: str):
    """A Delta table by any location: local, or on the local S3 server (either scheme spelling)."""
    from deltalake import DeltaTable

    from tidemark.storage import ObjectStore, delta_rs_uri, is_object_store

    if not is_object_store(table_uri):
        return DeltaTable(table_uri)
    store = ObjectStore(S3_ACCESS_KEY, S3_SECRET_KEY, endpoint_url=s3_endpoint())
    return DeltaTable(delta_rs_uri(table_uri), storage_options=store.delta_rs_options())


def bootstrap() -> str:
    return f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"


FREE_PORTS = range(20000, 27000)
"""Where `free_ports` looks: below Linux's ephemeral range (32768-60999), so no outgoing connection of Kafka,
Spark or Airflow takes a port between its choice and the service's bind, and below the fixed ports of the
broker clusters (27092, 27192)."""


def _bind_block(first: int, length: int) -> list | None:
    """Sockets bound to ports ``first`` .. ``first + length - 1`` on 127.0.0.1, or None (none left bound) if one
    of them is taken."""
    import socket

    block = []
    for port in range(first, first + length):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            probe.close()
            for bound in block:
                bound.close()
            return None
        block.append(probe)
    return block


def free_port_blocks(*lengths: int) -> list[int]:
    """For each of ``lengths``, the first of that many consecutive TCP ports on 127.0.0.1 nothing listens on right
    now; every port is held (bound) until all are chosen, so services started together never share one."""
    import random

    held, firsts = [], []
    try:
        for first in random.sample(FREE_PORTS, len(FREE_PORTS)):
            if len(firsts) == len(lengths):
                return firsts
            block = _bind_block(first, lengths[len(firsts)])
            if block is not None:
                firsts.append(first)
                held += block
        if len(firsts) == len(lengths):
            return firsts
        raise RuntimeError(f"no free ports for blocks of {lengths} in {FREE_PORTS.start}-{FREE_PORTS.stop - 1}")
    finally:
        for probe in held:
            probe.close()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (`free_port_blocks` of one port each)."""
    return free_port_blocks(*[1] * count)


def free_port() -> int:
    """A TCP port nothing listens on right now (`free_ports`)."""
    return free_ports(1)[0]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def create_topic(name: str, partitions: int = 3, configs: dict | None = None) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap())
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()
    return name


def past_ms(seconds: float) -> int:
    """An epoch-millisecond record timestamp ``seconds`` ago, on a whole second. Records sent with
    explicit timestamps (``produce(..., timestamp_ms=...)``) are apart in Kafka time without any
    sleep; stay within the topic's retention (7 days by default)."""
    return (int(time.time()) - int(seconds)) * 1000


def at_ms(timestamp_ms: int) -> dt.datetime:
    """An epoch-millisecond timestamp as an aware UTC date-time."""
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)


def produce(topic: str, count: int, start: int = 0, timestamp_ms: int | None = None) -> Counter:
    """Send ``count`` JSON order events round-robin over the partitions; returns records per partition.
    ``timestamp_ms`` sets every record's Kafka timestamp (default: the producer's clock)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap())
    partitions = sorted(producer.partitions_for(topic))
    per_partition: Counter = Counter()
    for i in range(start, start + count):
        p = partitions[i % len(partitions)]
        value = json.dumps({"order_id": i, "amount": round(i * 1.5, 2)}).encode()
        producer.send(topic, key=f"k{i}".encode(), value=value, partition=p, headers=[("source", b"test")],
                      timestamp_ms=timestamp_ms)
        per_partition[p] += 1
    producer.flush()
    producer.close()
    return per_partition


def produce_values(topic: str, values: list[bytes], partition: int = 0, timestamp_ms: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None) -> None:
    """Send exact value bytes (poison records, say) to one partition, keyed ``v<i>``, at ``timestamp_ms`` and with
    ``headers`` if given."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap(), max_request_size=4 * 1024 * 1024)
    for i, value in enumerate(values):
        producer.send(topic, key=f"v{i}".encode(), value=value, partition=partition, timestamp_ms=timestamp_ms,
                      headers=headers)
    producer.flush()
    producer.close()


def produce_pairs(topic: str, pairs: list[tuple[bytes | None, bytes | None]], partition: int = 0) -> None:
    """Send exact (key, value) bytes to one partition; None sends no key (or a tombstone)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap())
    for key, value in pairs:
        producer.send(topic, key=key, value=value, partition=partition)
    producer.flush()
    producer.close()


def produce_at_times(topic: str, stamps: list[str], partitions: tuple[int, ...] = (0, 1)) -> None:
    """One JSON record ``{"i": n}`` per ISO-8601 time stamp (UTC) on each of ``partitions``, with that
    record timestamp: offsets n of every partition carry the n-th time."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap())
    for i, stamp in enumerate(stamps):
        ms = int(dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC).timestamp() * 1000)
        for partition in partitions:
            producer.send(topic, value=json.dumps({"i": i}).encode(), partition=partition, timestamp_ms=ms)
    producer.flush()
    producer.close()


def schema_registry_url() -> str:
    """The local Schema Registry's Confluent-compatible API (scripts/registry.sh) of this run."""
    return os.environ.get("SCHEMA_REGISTRY_URL") or \
        f"http://127.0.0.1:{os.environ.get('REGISTRY_PORT', '8081')}/apis/ccompat/v7"


def registry_connection(url: str | None = None) -> str:
    """An ``http`` Airflow connection (JSON) to a Schema Registry: the local one by default."""
    return json.dumps({"conn_type": "http", "host": url or schema_registry_url()})


def register_schema(subject: str, schema: dict, url: str | None = None, schema_type: str = "AVRO") -> int:
    """Register a schema (Avro by default; ``JSON`` for a JSON Schema) under ``subject`` (Confluent-compatible API);
    returns its global id."""
    import requests

    response = requests.post(f"{url or schema_registry_url()}/subjects/{subject}/versions", timeout=10,
                             json={"schema": json.dumps(schema), "schemaType": schema_type},
                             headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    response.raise_for_status()
    return int(response.json()["id"])


def set_compatibility(subject: str, level: str, url: str | None = None) -> None:
    """The subject's compatibility rule (``NONE`` lets a test register an incompatible version)."""
    import requests

    requests.put(f"{url or schema_registry_url()}/config/{subject}", json={"compatibility": level},
                 timeout=10).raise_for_status()


def avro_value(schema_id: int, schema: dict, record: dict) -> bytes:
    """``record`` in the Confluent wire format: magic byte 0, the 4-byte schema id, the Avro body."""
    import io

    from fastavro import parse_schema, schemaless_writer

    body = io.BytesIO()
    schemaless_writer(body, parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


def spark_connect_url() -> str:
    """The local Spark Connect server (scripts/connect.sh) of this run."""
    return os.environ.get("SPARK_CONNECT_URL") or f"sc://127.0.0.1:{os.environ.get('CONNECT_PORT', '15002')}"


def spark_connect_connection(url: str | None = None) -> str:
    """A ``spark_connect`` Airflow connection (JSON) to a Spark Connect server: the local one by default."""
    address = (url or spark_connect_url()).removeprefix("sc://").rstrip("/")
    host, port = address.rsplit(":", 1)
    return json.dumps({"conn_type": "spark_connect", "host": host, "port": int(port)})


def end_offsets(topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap(), isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def service_env(pipelines, lake, **extra: str) -> dict[str, str]:
    """The environment of a Tidemark process (CLI, Airflow, spark-submit) pointed at the test
    broker, a local Spark master and a private lake and pipelines folder."""
    env = {
        **os.environ,
        "TIDEMARK_PIPELINES_DIR": str(pipelines),
        "TIDEMARK_LAKE_ROOT": str(lake),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap()}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        **extra,
    }
    env.pop("TIDEMARK_LEDGER_URI", None)
    return env


def query(table_uri: str, sql: str) -> list[dict]:
    """SQL over a Delta table registered as ``t`` (delta-rs; no JVM)."""
    from deltalake import QueryBuilder

    reader = QueryBuilder().register("t", _table(table_uri)).execute(sql)
    return pa.table(reader.read_all()).to_pylist()


def query_or_none(table_uri: str, sql: str = "SELECT COUNT(*) AS n FROM t") -> list[dict] | None:
    """Like query, but None when there is no table at all."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return query(table_uri, sql)
    except TableNotFoundError:
        return None


def table_version(table_uri: str) -> int:
    return _table(table_uri).version()


def txn_version(table_uri: str, app_id: str) -> int | None:
    """The idempotent-write marker (``txnAppId`` -> ``txnVersion``) a Delta table holds for ``app_id``;
    None without one or without a table (delta-rs; no JVM)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return _table(table_uri).transaction_version(app_id)
    except TableNotFoundError:
        return None


def describe_group(group: str) -> dict[int, tuple[int, int]]:
    """Kafka's own consumer-groups tool (from the broker jars): partition -> (current offset, lag)."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "kafka.sh"
    result = subprocess.run([str(script), "run-class", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                             "--bootstrap-server", bootstrap(), "--describe", "--group", group],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[0] == group and cols[2].isdigit():
            rows[int(cols[2])] = (int(cols[3]), int(cols[5]))
    return rows


def _master_state(ui_port: int) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        return json.load(response)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, started and stopped by
    scripts/spark_cluster.sh (`make spark-cluster-up`, the documented way) on free ports, each worker with a
    working directory of its own under ``work`` (no node shares a folder with another)."""

    def __init__(self, work, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work, self.workers, self.cores, self.memory = work, workers, cores, memory
        self.port, self.ui_port = free_ports(2)

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def worker_dir(self, i: int):
        return self.work / f"worker-{i}"

    def state(self) -> dict:
        return _master_state(self.ui_port)

    def _script(self, command: str) -> None:
        import subprocess
        from pathlib import Path

        env = {**os.environ, "SPARK_CLUSTER_HOME": str(self.work), "SPARK_WORKERS": str(self.workers),
               "SPARK_MASTER_PORT": str(self.port), "SPARK_MASTER_WEBUI_PORT": str(self.ui_port),
               "SPARK_WORKER_WEBUI_PORT": "0", "SPARK_WORKER_CORES": str(self.cores),
               "SPARK_WORKER_MEMORY": self.memory}
        if os.environ.get("SPARK_SUBMIT_OPTS"):  # the test run's JVM options (devkit/spark_cds.py), for the
            env["JDK_JAVA_OPTIONS"] = os.environ["SPARK_SUBMIT_OPTS"]  # daemons and the executors they start
        script = Path(__file__).resolve().parents[1] / "scripts" / "spark_cluster.sh"
        run = subprocess.run([str(script), command], env=env, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"`scripts/spark_cluster.sh {command}` (master {self.master}, {self.workers} workers, "
                               f"logs in {self.work}) failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")

    def __enter__(self) -> StandaloneCluster:
        self._script("up")
        return self

    def __exit__(self, *exc) -> None:
        self._script("down")


if __name__ == "__main__":  # `python -m devkit.localstack connect-conf` (scripts/test.sh)
    import sys

    if sys.argv[1:] != ["connect-conf"]:
        sys.exit("usage: python -m devkit.localstack connect-conf")
    print(connect_conf())
