"""A keyed table kept current from a real Debezium PostgreSQL connector (issue 39): inserts, updates and deletes
made in SQL reach the Delta table through Kafka Connect and Tidemark, batch after batch, as JSON and as Avro
through the Schema Registry; the reference is PostgreSQL's own table, read back with SQL. A replay of every
committed offset changes nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from tests import helpers
from tests.cdc import Debezium
from tidemark import settings
from tidemark.audit.live_table import audit_tables
from tidemark.audit.pipeline_audit import table_keys
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.config.pipeline import parse_pipeline
from tidemark.formats.schema_registry import RegistryClient
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration


def run(spark, config, props, schemas=None):
    plan = prepare_batch(config, props, schemas=schemas)
    if not plan.is_empty:
        execute_batch(spark, plan, props)
    return plan


def source_rows(debezium: Debezium, table: str) -> dict[int, tuple]:
    return {r[0]: (r[1], r[2] and r[2].astimezone(dt.UTC)) for r in debezium.sql(
        f"SELECT id, name, updated_at FROM {table}")}


def delta_rows(uri: str) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["updated_at"]) for r in helpers.query(uri, "SELECT id, name, updated_at FROM t")}


def test_sql_changes_reach_the_keyed_table_through_debezium(debezium: Debezium, spark, lake):
    table = debezium.unique_table("customers")
    topic = debezium.create_table(table, "id int PRIMARY KEY, name text, updated_at timestamptz")
    debezium.sql(f"INSERT INTO {table} VALUES (1, 'ada', '2024-05-01 10:00:00.123456+00'), "
                 f"(2, 'bob', '2024-05-01 10:00:01+00'), (3, 'cy', '2024-05-01 10:00:02+00')")
    debezium.sql(f"UPDATE {table} SET name = 'ada l', updated_at = '2024-05-02 09:30:00+02' WHERE id = 1")
    debezium.sql(f"DELETE FROM {table} WHERE id = 2")
    debezium.read(topic, 6)  # c, c, c, u, d and the tombstone: Connect has written them
    config = parse_pipeline({"name": table, "topics": [topic], "table": table, "value_format": "json",
                             "value_schema": {"id": "int", "name": "string?", "updated_at": "timestamp?"},
                             "keyed": {"envelope": "debezium"}}, "test")  # the keys: the Kafka key's fields
    props = {"bootstrap.servers": debezium.bootstrap}
    assert run(spark, config, props).format.keyed.keys == ("id",)
    assert delta_rows(config.table_uri) == source_rows(debezium, table) and len(source_rows(debezium, table)) == 2

    debezium.sql(f"INSERT INTO {table} VALUES (2, 'bob again', '2024-05-03 00:00:00+00')")
    debezium.sql(f"UPDATE {table} SET name = 'cy 2' WHERE id = 3")
    debezium.sql(f"DELETE FROM {table} WHERE id = 1")
    debezium.sql(f"INSERT INTO {table} VALUES (4, NULL, NULL)")
    debezium.read(topic, 11)
    run(spark, config, props)
    expected = source_rows(debezium, table)
    assert delta_rows(config.table_uri) == expected and sorted(expected) == [2, 3, 4]
    rows = helpers.query(config.table_uri, "SELECT id, cdc_op FROM t ORDER BY id")
    assert [(r["id"], r["cdc_op"]) for r in rows] == [(2, "c"), (3, "u"), (4, "c")]
    assert helpers.query_or_none(config.dead_letter_uri) is None  # no dead letter: every event was a row change

    version = helpers.table_version(config.table_uri)
    reset_offsets(config, props, ResetRequest("to-earliest", execute=True, reason="replay", owner="test"))
    run(spark, config, props)
    assert delta_rows(config.table_uri) == expected and helpers.table_version(config.table_uri) <= version + 1
    assert table_keys(config, settings.ledger_uri(), None) == ["id"]  # what the audit checks: one row per id
    assert audit_tables(table, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"]).ok
    assert sum(r.record_count for r in Ledger(settings.ledger_uri()).rows(table) if r.kind == "batch") == 11 + 11

    # The same events into a history table (keyed.history: scd2): every version the SQL above made, in order, each
    # ending where the next change of its key (an update or a delete) starts; the current ones are PostgreSQL's rows.
    history = parse_pipeline({"name": f"{table}_history", "topics": [topic], "table": f"{table}_history",
                              "value_format": "json", "value_schema": config.value_schema,
                              "keyed": {"keys": ["id"], "envelope": "debezium", "history": "scd2"}}, "test")
    run(spark, history, props)
    versions = helpers.query(history.table_uri, "SELECT id, name, cdc_op, valid_from, valid_to, is_current FROM t "
                                                "ORDER BY id, cdc_position")
    assert [(r["id"], r["name"], r["cdc_op"], r["is_current"]) for r in versions] == [
        (1, "ada", "c", False), (1, "ada l", "u", False), (2, "bob", "c", False), (2, "bob again", "c", True),
        (3, "cy", "c", False), (3, "cy 2", "u", True), (4, None, "c", True)]
    by_key = {k: [r for r in versions if r["id"] == k] for k in (1, 2, 3)}
    assert by_key[1][0]["valid_to"] == by_key[1][1]["valid_from"] and by_key[1][1]["valid_to"] is not None
    assert by_key[2][0]["valid_to"] < by_key[2][1]["valid_from"]  # deleted, then inserted again: a gap
    assert by_key[3][0]["valid_to"] == by_key[3][1]["valid_from"]
    assert {r["id"]: r["name"] for r in versions if r["is_current"]} == {k: v[0] for k, v in expected.items()}
    assert audit_tables(history.name, history.table_uri, history.dead_letter_uri, settings.ledger_uri(),
                        keys=["id"], history=True).ok


def test_avro_change_events_through_the_schema_registry(debezium: Debezium, schema_registry, spark, lake):
    """Debezium's Avro envelope (Apicurio's AvroConverter, Confluent wire format) decoded with the schemas frozen
    from the registry: a snapshot (r), inserts, updates, a delete and its tombstone, and a column added in
    PostgreSQL, which adds the table's column; the table's columns are the after image's fields."""
    table = debezium.unique_table("accounts")
    debezium.create_table(table, "id int PRIMARY KEY, name text, balance numeric(12,2), updated_at timestamptz, "
                                 "born date, seen timestamp")
    debezium.sql(f"INSERT INTO {table} VALUES (1, 'ada', 10.50, '2024-05-01 10:00:00.123456+00', '1815-12-10', "
                 f"'2024-05-01 10:00:00.654321'), (2, 'bob', 0, '2024-05-01 10:00:01+00', NULL, NULL), "
                 f"(3, 'cy', NULL, NULL, NULL, NULL)")
    with debezium.avro_connector(table, schema_registry) as topic:
        debezium.read(topic, 3, raw=True)  # the snapshot: r, r, r
        config = parse_pipeline({"name": table, "topics": [topic], "table": table, "value_format": "avro",
                                 "key_format": "avro", "keyed": {"envelope": "debezium"}}, "test")
        props, registry = {"bootstrap.servers": debezium.bootstrap}, RegistryClient(schema_registry)
        assert run(spark, config, props, registry).format.keyed.keys == ("id",)  # the Avro key's record
        assert avro_rows(config.table_uri) == accounts(debezium, table) and len(accounts(debezium, table)) == 3
        types = dict(spark.read.format("delta").load(config.table_uri).dtypes)
        assert {c: types[c] for c in ("id", "name", "balance", "updated_at", "born", "seen", "cdc_op",
                                      "cdc_position")} == {
            "id": "int", "name": "string", "balance": "string", "updated_at": "string", "born": "date",
            "seen": "timestamp_ntz", "cdc_op": "string", "cdc_position": "bigint"}
        # Debezium's Date (days) and MicroTimestamp (microseconds) read back as PostgreSQL's date and timestamp
        held = helpers.query(config.table_uri, "SELECT id, born, seen FROM t")
        times = {r["id"]: (r["born"], r["seen"]) for r in held}
        assert times == {r[0]: (r[1], r[2]) for r in debezium.sql(f"SELECT id, born, seen FROM {table}")}
        assert times[1] == (dt.date(1815, 12, 10), dt.datetime(2024, 5, 1, 10, 0, 0, 654321))

        debezium.sql(f"INSERT INTO {table} VALUES (4, 'dee', 99999999.99, '2024-05-03 00:00:00+00')")
        debezium.sql(f"UPDATE {table} SET name = 'ada l', balance = 11.25 WHERE id = 1")
        debezium.sql(f"DELETE FROM {table} WHERE id = 2")
        debezium.sql(f"ALTER TABLE {table} ADD COLUMN tier text")
        debezium.sql(f"UPDATE {table} SET tier = 'gold' WHERE id = 3")
        debezium.read(topic, 3 + 5, raw=True)  # c, u, d, the tombstone, u
        run(spark, config, props, registry)
    expected = accounts(debezium, table, "tier")
    assert avro_rows(config.table_uri, "tier") == expected and sorted(expected) == [1, 3, 4]
    rows = spark.read.format("delta").load(config.table_uri).select("id", "key.id", "cdc_op").orderBy("id")
    assert [tuple(r) for r in rows.collect()] == [(1, 1, "u"), (3, 3, "u"), (4, 4, "c")]
    assert helpers.query_or_none(config.dead_letter_uri) is None  # no dead letter; the tombstone changed nothing
    batches = sorted((r.batch_id, r.record_count) for r in Ledger(settings.ledger_uri()).rows(table)
                     if r.kind == "batch")
    assert [count for _, count in batches] == [3, 5]  # the snapshot; c, u, d, the tombstone, u
    assert audit_tables(table, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"]).ok


def accounts(debezium: Debezium, table: str, *extra: str) -> dict[int, tuple]:
    """PostgreSQL's rows as Debezium writes them (decimal.handling.mode=string: the numeric's text)."""
    columns = ", ".join(["id", "name", "balance::text", "updated_at", *extra])
    return {r[0]: (r[1], r[2], r[3] and r[3].astimezone(dt.UTC), *r[4:])
            for r in debezium.sql(f"SELECT {columns} FROM {table}")}


def avro_rows(uri: str, *extra: str) -> dict[int, tuple]:
    """The Delta table's rows, the ISO-8601 text of a timestamptz (Debezium's ZonedTimestamp) read back."""
    rows = helpers.query(uri, f"SELECT {', '.join(['id', 'name', 'balance', 'updated_at', *extra])} FROM t")
    return {r["id"]: (r["name"], r["balance"], r["updated_at"] and dt.datetime.fromisoformat(r["updated_at"]),
                      *(r[c] for c in extra)) for r in rows}


def test_the_columns_and_keys_come_from_the_json_converters_schema(debezium: Debezium, spark, lake):
    """No value_schema and no keys: each batch takes the row's columns from the JsonConverter's schema wrapper of its
    newest change, and the keys from the Kafka key; a column added in PostgreSQL adds the table's column, and a batch
    of a tombstone alone takes the columns of the change before it."""
    table = debezium.unique_table("parts")
    debezium.create_table(table, "id int PRIMARY KEY, name text NOT NULL, qty smallint, price numeric(12,2), "
                                 "updated_at timestamptz, born date, ok boolean, big bigint, ratio double precision")
    debezium.sql(f"INSERT INTO {table} VALUES (1, 'bolt', 3, 1.50, '2024-05-01 10:00:00+00', '2024-01-02', true, "
                 f"9007199254740993, 0.25), (2, 'nut', NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    with debezium.json_schema_connector(table) as topic:
        debezium.read(topic, 2)  # the snapshot: r, r
        config = parse_pipeline({"name": table, "topics": [topic], "table": table, "value_format": "json",
                                 "keyed": {"envelope": "debezium"}}, "test")
        props = {"bootstrap.servers": debezium.bootstrap}
        plan = run(spark, config, props)
        assert plan.format.keyed.keys == ("id",)
        assert [(f.name, f.type, f.required) for f in plan.format.fields] == [
            ("id", "int", False), ("name", "string", False), ("qty", "smallint", False), ("price", "string", False),
            ("updated_at", "timestamp", False), ("born", "int", False), ("ok", "boolean", False),
            ("big", "bigint", False), ("ratio", "double", False)]
        got = {r["id"]: r for r in helpers.query(config.table_uri, "SELECT * FROM t")}
        assert (got[1]["name"], got[1]["qty"], got[1]["price"], got[1]["born"], got[1]["ok"], got[1]["big"],
                got[1]["ratio"]) == ("bolt", 3, "1.50", (dt.date(2024, 1, 2) - dt.date(1970, 1, 1)).days, True,
                                     9007199254740993, 0.25)
        assert got[1]["updated_at"] == dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC) and got[2]["qty"] is None

        debezium.sql(f"ALTER TABLE {table} ADD COLUMN tier text")
        debezium.sql(f"UPDATE {table} SET tier = 'gold', qty = 4 WHERE id = 1")
        debezium.sql(f"DELETE FROM {table} WHERE id = 2")
        debezium.read(topic, 2 + 3)  # u, d and its tombstone
        plan = run(spark, config, props)
        assert [f.name for f in plan.format.fields][-1] == "tier" and plan.format.add_columns
        rows = helpers.query(config.table_uri, "SELECT id, qty, tier, cdc_op FROM t ORDER BY id")
        assert [tuple(r.values()) for r in rows] == [(1, 4, "gold", "u")]
        assert helpers.query_or_none(config.dead_letter_uri) is None
    assert audit_tables(table, config.table_uri, config.dead_letter_uri, settings.ledger_uri(),
                        keys=table_keys(config, settings.ledger_uri(), None)).ok
