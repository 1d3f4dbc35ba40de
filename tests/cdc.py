"""The change data capture stack of `scripts/cdc.sh` for tests: a private PostgreSQL (database `shop`,
wal_level=logical) and Kafka Connect (standalone) with the real Debezium PostgreSQL connector (pgoutput),
writing to the test session's broker.

The stack starts once per test session (a file lock keeps two pytest-xdist workers from starting it twice;
a running stack is reused) and stays up afterwards, like the TLS cluster: `make cdc-down` stops it. A stack
left by an earlier session that writes to another broker (another port, or a broker started afresh since,
as `make test` does) or whose connector is not running is restarted.

Tables: the connector captures every table of schema `public` (publication.autocreate.mode=all_tables), also
tables created while it runs, so a test creates its own table (``unique_table`` / ``create_table``) and
reads its topic, ``<prefix>.public.<table>``. ``create_table`` keeps PostgreSQL's default replica identity,
the primary key: an update's ``before`` is null and a delete's ``before`` holds the key columns (the others
null); ``replica_identity="full"`` gives whole old rows in both. Under the all_tables publication a table
without a primary key refuses UPDATE and DELETE unless its replica identity is FULL.

Avro: ``Debezium.avro_connector`` runs a connector of a test's own on the same worker, with Apicurio's
AvroConverter set on the connector (Kafka Connect takes converters per connector), against the session's Schema
Registry: no second stack to start, and a snapshot of the test's table (``r`` events) when it starts.

Register the fixture ``debezium`` in a conftest: ``from tests.cdc import debezium  # noqa: F401``."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "cdc.sh"


@dataclass(frozen=True)
class Change:
    """One record of a Debezium topic: its Kafka coordinates and its key and value as JSON (``value`` None:
    a tombstone)."""

    offset: int
    key: Any
    value: Any
    timestamp_ms: int

    @property
    def op(self) -> str | None:
        return None if self.value is None else self.value["op"]


@dataclass(frozen=True)
class Debezium:
    env: dict[str, str]  # scripts/cdc.sh env: CDC_PG_DSN, CDC_TOPIC_PREFIX, CDC_CONNECT_URL, ...

    @property
    def dsn(self) -> str:
        return self.env["CDC_PG_DSN"]

    @property
    def prefix(self) -> str:
        return self.env["CDC_TOPIC_PREFIX"]

    @property
    def bootstrap(self) -> str:
        return self.env["CDC_KAFKA_BOOTSTRAP"]

    def sql(self, statement: str, params: tuple | dict | None = None) -> list[tuple]:
        """Run one statement on `shop` in its own committed transaction; the rows it returns, if any."""
        import psycopg2

        connection = psycopg2.connect(self.dsn)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(statement, params)
                return cursor.fetchall() if cursor.description else []
        finally:
            connection.close()

    def topic(self, table: str, schema: str = "public") -> str:
        return f"{self.prefix}.{schema}.{table}"

    @staticmethod
    def unique_table(prefix: str) -> str:
        return f"{prefix}_{uuid.uuid4().hex[:10]}"

    def create_table(self, name: str, columns: str, replica_identity: str = "default") -> str:
        """``CREATE TABLE name (columns)`` (give it a primary key), captured from then on; its topic name.
        ``replica_identity``: "default" (the primary key) or "full" (whole old rows in updates and deletes)."""
        if replica_identity not in ("default", "full"):
            raise ValueError(f"replica_identity is 'default' or 'full', not {replica_identity!r}")
        self.sql(f"CREATE TABLE {name} ({columns})")
        if replica_identity == "full":
            self.sql(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        return self.topic(name)

    def read(self, topic: str, count: int, timeout: float = 60, raw: bool = False) -> list[Change]:
        """The first ``count`` records of the (single-partition) topic, tombstones included, waiting up to
        ``timeout`` seconds for Connect to create the topic and for the records to arrive. ``raw``: keys and
        values as bytes (Avro), not JSON."""
        from kafka import KafkaConsumer, TopicPartition

        decode = (lambda b: b) if raw else _json
        deadline = time.monotonic() + timeout
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", request_timeout_ms=10000)
        try:
            while not consumer.partitions_for_topic(topic):
                if time.monotonic() >= deadline:
                    pytest.fail(f"timed out after {timeout:.0f} s waiting for Debezium's topic {topic} "
                                f"(connector: {self.connector_status()})")
                time.sleep(0.3)
                consumer.topics()  # refreshes the metadata
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            changes: list[Change] = []
            while len(changes) < count:
                if time.monotonic() >= deadline:
                    pytest.fail(f"timed out after {timeout:.0f} s: {len(changes)} of {count} records in {topic}: "
                                f"{changes}")
                for records in consumer.poll(timeout_ms=500).values():
                    changes.extend(Change(r.offset, decode(r.key), decode(r.value), r.timestamp) for r in records)
            return changes[:count]
        finally:
            consumer.close()

    def connector_status(self, name: str | None = None) -> str:
        import requests

        try:
            connector = name or self.env["CDC_CONNECTOR"]
            return requests.get(f"{self.env['CDC_CONNECT_URL']}/connectors/{connector}/status", timeout=5).text
        except Exception as exc:  # only for messages
            return f"no answer ({exc})"

    @contextmanager
    def avro_connector(self, table: str, registry_url: str, timeout: float = 60) -> Iterator[str]:
        """A Debezium connector of the caller's own on the stack's worker: the stack's connector settings (read
        from Connect), capturing ``public.<table>`` only (its own publication and replication slot), with
        Apicurio's AvroConverter for keys and values against the Schema Registry at ``registry_url`` (its
        Confluent-compatible API; the converter uses the native v2 API beside it), in the Confluent wire
        format, and ``schema.name.adjustment.mode=avro`` (its topic prefix, ``avro-<table>``, holds a '-', which
        an Avro name cannot). Starting, it snapshots the rows the table holds (op ``r``), then streams; yields its
        topic. Deleted afterwards, with its slot and publication."""
        with self._own_connector(table, "avro", {"schema.name.adjustment.mode": "avro",
                                                 **avro_converters(_native_registry(registry_url))}, timeout) as topic:
            yield topic

    @contextmanager
    def json_schema_connector(self, table: str, timeout: float = 60) -> Iterator[str]:
        """As ``avro_connector``, with Kafka Connect's JsonConverter writing each key and value with its ``schema``
        wrapper (``schemas.enable=true``): the records carry the table's columns. Yields its topic."""
        converters = {f"{part}.{k}": v for part in ("key", "value") for k, v in
                      {"converter": "org.apache.kafka.connect.json.JsonConverter",
                       "converter.schemas.enable": "true"}.items()}
        with self._own_connector(table, "json", converters, timeout) as topic:
            yield topic

    @contextmanager
    def _own_connector(self, table: str, kind: str, settings: dict[str, str], timeout: float) -> Iterator[str]:
        import requests

        url, name = self.env["CDC_CONNECT_URL"], f"tidemark-{kind}-{table}"
        slot = f"tidemark_{kind}_{table}"
        config = requests.get(f"{url}/connectors/{self.env['CDC_CONNECTOR']}/config", timeout=10).json()
        config |= {"name": name, "topic.prefix": f"{kind}-{table}", "slot.name": slot, "publication.name": slot,
                   "publication.autocreate.mode": "filtered", "table.include.list": f"public.{table}",
                   "slot.drop.on.stop": "true", **settings}
        requests.put(f"{url}/connectors/{name}/config", json=config, timeout=30).raise_for_status()
        try:
            self._await_running(name, timeout)
            yield f"{kind}-{table}.public.{table}"
        finally:
            requests.delete(f"{url}/connectors/{name}", timeout=30)
            self._drop_slot(slot, timeout)
            self.sql(f"DROP PUBLICATION IF EXISTS {slot}")

    def _await_running(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status = self.connector_status(name)
            if status.count('"state":"RUNNING"') >= 2:  # the connector and its one task
                return
            if '"state":"FAILED"' in status or time.monotonic() >= deadline:
                pytest.fail(f"connector {name} does not run: {status[:3000]}")
            time.sleep(0.3)

    def _drop_slot(self, slot: str, timeout: float) -> None:
        """Drop the replication slot once its connector let it go (``slot.drop.on.stop`` drops it first, mostly)."""
        deadline = time.monotonic() + timeout
        while self.sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)):
            if time.monotonic() >= deadline:
                pytest.fail(f"replication slot {slot} is still in use {timeout:.0f} s after its connector was deleted")
            time.sleep(0.3)
        self.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,))


def avro_converters(registry_url: str) -> dict[str, str]:
    """Apicurio's AvroConverter (2.6) for keys and values, as `scripts/cdc.sh` sets it with CDC_FORMAT=avro: the
    Confluent wire format (magic byte 0, the 4-byte id, the Avro body; no headers), schemas registered under
    ``<topic>-key`` / ``<topic>-value``, the id being the content id, which the Confluent-compatible API of
    Apicurio 3 serves as the schema id."""
    settings = {"converter": "io.apicurio.registry.utils.converter.AvroConverter",
                "converter.apicurio.registry.url": registry_url,
                "converter.apicurio.registry.auto-register": "true",
                "converter.apicurio.registry.find-latest": "true",
                "converter.apicurio.registry.as-confluent": "true",
                "converter.apicurio.registry.headers.enabled": "false",
                "converter.apicurio.registry.use-id": "contentId"}
    return {f"{part}.{k}": v for part in ("key", "value") for k, v in settings.items()}


def _native_registry(url: str) -> str:
    """Apicurio's v2 API beside its Confluent-compatible one (CDC_REGISTRY_URL, when set, names it)."""
    return os.environ.get("CDC_REGISTRY_URL") or url.split("/apis/", 1)[0] + "/apis/registry/v2"


def _json(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


def _script(*args: str, kafka_port: str | None = None) -> str:
    env = {**os.environ, "KAFKA_PORT": kafka_port} if kafka_port else None
    done = subprocess.run([str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/cdc.sh {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def _env() -> dict[str, str]:
    return dict(line.split("=", 1) for line in _script("env").splitlines() if "=" in line)


def _stale(env: dict[str, str], bootstrap: str) -> str | None:
    """Why a running stack cannot serve this session (None: it can)."""
    import requests
    from kafka.admin import KafkaAdminClient

    if env["CDC_KAFKA_BOOTSTRAP"] != bootstrap:
        return f"it writes to {env['CDC_KAFKA_BOOTSTRAP']}, not {bootstrap}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        cluster_id = admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()
    url = env["CDC_CONNECT_URL"]
    try:
        connected_to = requests.get(url, timeout=5).json()["kafka_cluster_id"]
        status = requests.get(f"{url}/connectors/{env['CDC_CONNECTOR']}/status", timeout=5).json()
    except Exception as exc:  # no answer, no connector: restart
        return f"Kafka Connect does not answer at {url} ({exc})"
    if connected_to != cluster_id:
        return f"it writes to Kafka cluster {connected_to}, the broker at {bootstrap} is {cluster_id}"
    states = [status["connector"]["state"], *(task["state"] for task in status["tasks"])]
    if len(states) < 2 or any(state != "RUNNING" for state in states):
        return f"its connector is not running: {status}"
    return None


def ensure_debezium(bootstrap: str) -> Debezium:
    """Start the stack against the broker at ``bootstrap`` (127.0.0.1:KAFKA_PORT) unless it runs there, under
    a lock; restart one that cannot serve (see the module's doc)."""
    port = bootstrap.rsplit(":", 1)[1]
    lock = ROOT / ".cache" / f"cdc-{os.environ.get('CDC_PG_PORT', '15432')}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _script("up", kafka_port=port)
        env = _env()
        reason = _stale(env, bootstrap)
        if reason:
            print(f"tests.cdc: restarting the CDC stack: {reason}")
            _script("down")
            _script("up", kafka_port=port)
            env = _env()
            reason = _stale(env, bootstrap)
            if reason:
                raise RuntimeError(f"the CDC stack cannot serve this session after a restart: {reason}")
    return Debezium(env=env)


@pytest.fixture(scope="session")
def debezium(kafka_bootstrap) -> Debezium:
    """The CDC stack (scripts/cdc.sh) on the session's broker, started once if it is not running
    (CDC_PG_PORT, CDC_CONNECT_PORT pick its ports); `make cdc-down` stops it."""
    try:
        return ensure_debezium(kafka_bootstrap)
    except RuntimeError as exc:
        pytest.fail(str(exc))
