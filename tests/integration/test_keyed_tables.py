"""Keyed tables (issue 39) against the real broker, Spark and Delta: inserts, updates and deletes across
batches, a kill -9 between the MERGE commit and the ledger's, a replay of committed ranges, an older range
replayed after newer ones, a backfill window, the dead-letter cases and Debezium change events (hand-made
envelopes here; the real connector's stream is in test_debezium.py). Each table is checked against a
reference built from the produced changes, independently of the product: the newest change per key (by
Kafka position, or by ``updated_at`` where the pipeline orders by it), deleted keys absent; and the rows each
batch inserted, updated and deleted, as the ledger records them from the MERGE commit, against the same
reference's difference before and after the batch."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from tests import helpers
from tests.integration.test_crash_points import recover, tidemark_run
from tests.unit.tidemark.avro_samples import debezium_envelope
from tidemark import fault_injection, settings
from tidemark.audit.live_table import audit_tables
from tidemark.batch.backfill import BackfillRequest, prepare_backfill
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.batch.status import recent_entries
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError, KeyOrderingError
from tidemark.formats.schema_registry import RegistryClient
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

SCHEMA = {"id": "bigint", "name": "string?", "qty": "int?", "op": "string?"}


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def keyed_pipeline(topic: str, schema: dict | None = None, **keyed):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": schema or SCHEMA,
                           "keyed": {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"], **keyed}},
                          "test")


def change(key: int, name: str | None = None, qty: int | None = None, op: str | None = None,
           **extra) -> tuple[bytes, bytes | None]:
    """One change of key ``key``: an upsert, a delete by ``op``, or a tombstone (``name`` is ``"TOMBSTONE"``)."""
    if name == "TOMBSTONE":
        return json.dumps({"id": key}).encode(), None
    return json.dumps({"id": key}).encode(), json.dumps({"id": key, "name": name, "qty": qty, "op": op,
                                                         **extra}).encode()


class Reference:
    """The table a keyed pipeline must hold, computed from the changes as they were produced."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple] = {}
        self.before: dict[int, tuple] = {}
        self.touched: set[int] = set()

    def apply(self, changes: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in changes:
            k = json.loads(key)["id"]
            self.touched.add(k)
            record = json.loads(value) if value is not None else None
            if record is None or record.get("op") == "delete":
                self.rows.pop(k, None)
            else:
                self.rows[k] = (record["name"], record["qty"])

    def batch_changes(self) -> tuple[int, int, int]:
        """The rows (inserted, updated, deleted) that the changes produced since the last call must change: keys
        the table gains, keys changed and kept (a change of the same values is an update too), keys it loses."""
        kept = self.before.keys() & self.rows.keys()
        changes = (len(self.rows.keys() - self.before.keys()), len(kept & self.touched),
                   len(self.before.keys() - self.rows.keys()))
        self.before, self.touched = dict(self.rows), set()
        return changes


def ledger_changes(pipeline: str) -> dict[int, tuple[int | None, ...]]:
    """Per batch and backfill entry, the rows it inserted, updated and deleted as the ledger says (the page's and
    the metrics' reader)."""
    return {e["batch_id"]: (e["rows_inserted"], e["rows_updated"], e["rows_deleted"])
            for e in recent_entries(pipeline, 50) if e["kind"] in ("batch", "backfill")}


def table(uri: str) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["qty"]) for r in helpers.query(uri, "SELECT id, name, qty FROM t")}


def run(spark, config) -> None:
    plan = prepare_batch(config, props())
    if not plan.is_empty:
        execute_batch(spark, plan, props())


def produce(topic: str, reference: Reference, changes: list, partition: int = 0) -> None:
    helpers.produce_pairs(topic, changes, partition=partition)
    reference.apply(changes)


def test_inserts_updates_and_deletes_across_batches_and_replays_change_nothing(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("keyed"), partitions=1)
    config, ref = keyed_pipeline(topic), Reference()
    produce(topic, ref, [change(1, "a", 1), change(2, "b", 2), change(1, "a2", 10), change(3, "c", 3),
                         change(2, "TOMBSTONE")])  # within the batch: 1 updated twice, 2 inserted then deleted
    run(spark, config)
    assert table(config.table_uri) == ref.rows == {1: ("a2", 10), 3: ("c", 3)}
    expected = {1: ref.batch_changes()}  # the first batch creates the table: inserts only

    produce(topic, ref, [change(3, "c", op="delete"), change(4, "d", 4), change(1, "a3", 11), change(2, "b2", 20)])
    run(spark, config)
    assert table(config.table_uri) == ref.rows == {1: ("a3", 11), 2: ("b2", 20), 4: ("d", 4)}
    expected[2] = ref.batch_changes()
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS k FROM t") == [{"n": 3,
                                                                                                        "k": 3}]
    ledger = Ledger(settings.ledger_uri())
    assert sorted((r.batch_id, r.record_count, r.status) for r in ledger.rows(topic) if r.kind == "batch") == [
        (1, 5, "committed"), (2, 4, "committed")]

    # A replay of everything committed (reset to earliest, then a run): every change is below the high water.
    version = helpers.table_version(config.table_uri)
    reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="replay test", owner="test"))
    run(spark, config)
    assert table(config.table_uri) == ref.rows
    assert helpers.table_version(config.table_uri) <= version + 1  # at most an empty commit
    expected[4] = ref.batch_changes()  # entry 3 is the reset

    # An older range replayed after newer ones (a backfill window of batch 1's offsets): key 2 was deleted then
    # inserted again, key 3 deleted; nothing moves back in time and nothing deleted comes back.
    produce(topic, ref, [change(2, "TOMBSTONE"), change(5, "e", 5)])
    run(spark, config)
    assert table(config.table_uri) == ref.rows == {1: ("a3", 11), 4: ("d", 4), 5: ("e", 5)}
    expected[5] = ref.batch_changes()
    backfill = prepare_backfill(config, props(), BackfillRequest(offsets={TopicPartition(topic, 0): (0, 5)}),
                                owner="test")
    execute_batch(spark, backfill, props())
    assert table(config.table_uri) == ref.rows
    expected[6] = ref.batch_changes()

    # What each MERGE did to the rows (Delta's operation metrics of its commit), as the ledger records it.
    assert expected == {1: (2, 0, 0), 2: (2, 1, 1), 4: (0, 0, 0), 5: (1, 0, 1), 6: (0, 0, 0)}  # the reference's
    assert ledger_changes(topic) == expected

    # The audit: no key twice, no coordinate twice, nothing outside the committed ranges.
    report = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"])
    assert report.ok and report.records == 3, report.to_dict()
    twice = spark.read.format("delta").load(config.table_uri).where("id = 1")
    twice.withColumn("kafka_offset", F.lit(10**6).cast("bigint")).write.format("delta").mode("append") \
        .save(config.table_uri)  # damage: key 1 twice
    damaged = audit_tables(topic, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"])
    assert not damaged.ok and damaged.duplicate_key_rows == 1 and damaged.duplicate_keys == [{"id": 1, "rows": 2}]


def test_a_kill_between_the_merge_commit_and_the_ledger_commit_applies_the_batch_once(kafka_bootstrap, spark,
                                                                                      spark_connect, lake, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, lake, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(
        spark_connect))
    topic = helpers.create_topic(helpers.unique("keyed-crash"), partitions=2)
    (pipelines / f"{topic}.yaml").write_text(json.dumps({
        "name": topic, "topics": [topic], "table": topic, "value_format": "json", "value_schema": SCHEMA,
        "keyed": {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"]}}))
    config, ref = keyed_pipeline(topic), Reference()
    produce(topic, ref, [change(k, f"n{k}", k) for k in range(6)], partition=0)
    produce(topic, ref, [change(k, f"n{k}", k) for k in range(10, 14)], partition=1)
    run(spark, config)
    expected = {1: ref.batch_changes()}
    produce(topic, ref, [change(1, "x", 100), change(2, "TOMBSTONE"), change(3, "y", op="delete")], partition=0)
    produce(topic, ref, [change(10, "z", 7), change(14, "w", 8)], partition=1)
    helpers.produce_pairs(topic, [(b'{"id": 15}', b"not json")], 1)  # a dead letter: written after the MERGE

    crashed, _ = tidemark_run({**env, "TIDEMARK_CRASH_AT": fault_injection.AFTER_OUTPUT_COMMIT,
                               "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")}, topic)
    assert (tmp_path / "crashed").exists(), crashed.stderr[-3000:]
    assert helpers.txn_version(config.table_uri, topic) == 2
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id == 2
    assert table(config.table_uri) == ref.rows  # the MERGE committed before the kill
    version = helpers.table_version(config.table_uri)
    recover(spark, topic, env, "spark-connect")
    assert table(config.table_uri) == ref.rows
    assert helpers.table_version(config.table_uri) == version, "the recovery must not merge the batch again"
    # The kill came before the dead letters: the recovery ran the batch again, Delta skipped its MERGE (the marker),
    # and the dead letter was written once.
    assert [r["kafka_offset"] for r in helpers.query(config.dead_letter_uri, "SELECT kafka_offset FROM t")] == [6]
    state = Ledger(settings.ledger_uri()).state(topic)
    assert state.pending_batch_id is None and state.last_batch_id == 2
    batch = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.batch_id == 2]
    assert sorted((r.partition, r.record_count, r.dead_letter_count) for r in batch) == [(0, 3, 0), (1, 3, 1)]
    # The roll-forward read what the MERGE did from its commit, found by the same history scan as the counts: the
    # batch's totals on its first partition's row, null on the other's.
    expected[2] = ref.batch_changes()
    assert expected == {1: (10, 0, 0), 2: (1, 2, 2)} and ledger_changes(topic) == expected
    assert sorted((r.partition, r.rows_inserted, r.rows_updated, r.rows_deleted) for r in batch) == [
        (0, *expected[2]), (1, None, None, None)]


def test_an_ordering_field_keeps_the_newest_change_and_bad_changes_are_dead_letters(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("keyed-order"), partitions=2)
    schema = {**SCHEMA, "updated_at": "timestamp?"}
    config = keyed_pipeline(topic, schema, order_by=["updated_at"])
    t = "2024-05-01T10:00:0{}Z".format
    helpers.produce_pairs(topic, [change(1, "new", 2, updated_at=t(5)), change(2, "b", 1, updated_at=t(1))], 0)
    helpers.produce_pairs(topic, [change(1, "old", 1, updated_at=t(3)),  # older, on another partition, later
                                  (json.dumps({"id": 7}).encode(), json.dumps({"name": "no id"}).encode()),
                                  change(8, "no time", 1)], 1)
    run(spark, config)
    assert table(config.table_uri) == {1: ("new", 2), 2: ("b", 1)}
    errors = {r["kafka_offset"]: r["error"] for r in helpers.query(config.dead_letter_uri,
                                                                    "SELECT kafka_offset, error FROM t")}
    assert errors == {1: "missing required field 'id'; key field 'id' is missing or null; ordering field "
                         "'updated_at' is missing or null: the change cannot be ordered",
                      2: "ordering field 'updated_at' is missing or null: the change cannot be ordered"}
    helpers.produce_pairs(topic, [change(2, "older", 9, updated_at=t(0)), change(1, "newest", 3, updated_at=t(9))], 1)
    run(spark, config)
    assert table(config.table_uri) == {1: ("newest", 3), 2: ("b", 1)}


def test_the_default_ordering_refuses_a_key_seen_on_two_partitions(kafka_bootstrap, spark, lake):
    """The table's row of key 1 came from partition 0, its change from partition 1: the MERGE refuses it (its first
    clause fails the job), and the batch's bad record gets no dead letter; a key on both partitions within one batch
    is refused before the MERGE."""
    topic = helpers.create_topic(helpers.unique("keyed-moved"), partitions=2)
    config = keyed_pipeline(topic)
    helpers.produce_pairs(topic, [change(1, "a", 1), change(2, "b", 1)], 0)
    run(spark, config)
    helpers.produce_pairs(topic, [change(1, "b", 2), (b'{"id": 3}', b"not json")], 1)
    version = helpers.table_version(config.table_uri)
    with pytest.raises(KeyOrderingError, match=r'key \{"id": 1\} is on two partitions \(the table\'s row came from '
                                               rf'{topic}:0, this change from {topic}:1\).*keyed.order_by'):
        run(spark, config)
    assert helpers.table_version(config.table_uri) == version and table(config.table_uri) == {1: ("a", 1),
                                                                                              2: ("b", 1)}
    assert not DeltaTable.is_deltatable(config.dead_letter_uri), "a refused batch wrote its dead letters"

    other = keyed_pipeline(helpers.create_topic(helpers.unique("keyed-moved"), partitions=2))
    helpers.produce_pairs(other.topics[0], [change(5, "a", 1)], 0)
    helpers.produce_pairs(other.topics[0], [change(5, "b", 1)], 1)
    with pytest.raises(KeyOrderingError, match=r'key \{"id": 5\} is on two partitions within this batch'):
        run(spark, other)
    assert not DeltaTable.is_deltatable(other.table_uri)


def debezium(op: str, before: dict | None, after: dict | None, lsn: int | None, wrapped: bool = False) -> bytes:
    event = {"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": 1714558800000 + (lsn or 0)},
             "ts_ms": 1714558800999}
    return json.dumps({"schema": {"type": "struct"}, "payload": event} if wrapped else event).encode()


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "schema-payload"])
def test_debezium_json_change_events(kafka_bootstrap, spark, lake, wrapped):
    topic = helpers.create_topic(helpers.unique("keyed-dbz"), partitions=1)
    # wrapped: the keys left out, so the batch takes them from the first record's key, wrapped as well
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": {"id": "bigint", "name": "string?"},
                             "keyed": {"envelope": "debezium", **({} if wrapped else {"keys": ["id"]})}}, "test")
    row = {"id": 1, "name": "a"}
    key = json.dumps({"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 1}}
                     if wrapped else {"id": 1}).encode()
    helpers.produce_pairs(topic, [
        (key, debezium("r", None, row, 10, wrapped)), (key, debezium("u", row, {"id": 1, "name": "b"}, 20, wrapped)),
        (b'{"id": 2}', debezium("c", None, {"id": 2, "name": "x"}, 30, wrapped)),
        (b'{"id": 2}', debezium("d", {"id": 2, "name": "x"}, None, 40, wrapped)), (b'{"id": 2}', None),
        (b'{"id": 3}', debezium("c", None, {"id": 3, "name": "z"}, 50, wrapped)),
        (b"x", json.dumps({"id": 9, "name": "not a change event"}).encode()),
        (b"x", debezium("t", None, None, 60, wrapped)), (b"x", debezium("c", None, {"id": 4}, None, wrapped))])
    run(spark, config)
    rows = helpers.query(config.table_uri, "SELECT id, name, cdc_op, cdc_position FROM t ORDER BY id")
    assert [tuple(r.values()) for r in rows] == [(1, "b", "u", 20), (3, "z", "c", 50)]
    errors = {r["kafka_offset"]: r["error"] for r in helpers.query(config.dead_letter_uri,
                                                                    "SELECT kafka_offset, error FROM t")}
    assert errors == {6: "not a Debezium change event (no 'op' field)",
                      7: "Debezium operation 't' is not a row change (c, u, r or d)",
                      8: "Debezium event without source.lsn or source.pos: no usable ordering"}
    # Debezium's own tombstone (offset 4) changed nothing and is no dead letter; the ledger counts every record.
    batch = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.kind == "batch"]
    assert [(r.record_count, r.dead_letter_count) for r in batch] == [(9, 3)]
    assert ledger_changes(topic) == {1: (2, 0, 0)}  # the batch created the table with keys 1 and 3
    # a backfill of the first changes freezes the same keys (from the Kafka key when left out) and changes nothing
    backfill = prepare_backfill(config, props(), BackfillRequest(offsets={TopicPartition(topic, 0): (0, 4)}),
                                owner="test")
    assert backfill.format.keyed.keys == ("id",)
    execute_batch(spark, backfill, props())
    assert [tuple(r.values()) for r in helpers.query(config.table_uri, "SELECT id, name, cdc_op, cdc_position FROM t "
                                                                        "ORDER BY id")] == [(1, "b", "u", 20),
                                                                                            (3, "z", "c", 50)]


def test_keys_left_out_and_a_key_that_is_not_debeziums_json_freeze_nothing(kafka_bootstrap, lake):
    topic = helpers.create_topic(helpers.unique("keyed-dbz-key"), partitions=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "value_schema": {"id": "bigint", "name": "string?"},
                             "keyed": {"envelope": "debezium"}}, "test")
    helpers.produce_pairs(topic, [(b"\x00\x00\x00\x00\x07\x02", debezium("c", None, {"id": 1, "name": "a"}, 10))])
    with pytest.raises(ConfigError, match=rf"the Kafka key at {topic} partition 0 offset 0 or after is not JSON "
                                          rf".*set key_format: avro\); name the key columns in keyed.keys"):
        prepare_batch(config, props())
    assert Ledger(settings.ledger_uri()).rows(topic) == []  # nothing frozen: the next run reads the same offsets


def test_without_a_value_schema_a_tombstone_alone_takes_the_columns_of_the_change_before_it(kafka_bootstrap, spark,
                                                                                            lake):
    """The columns come from the JsonConverter's schema of a batch's newest change; a batch that holds only
    Debezium's tombstone after a delete (the batch before ended at the delete) takes them from the change before."""
    topic = helpers.create_topic(helpers.unique("keyed-dbz-schema"), partitions=1)
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                             "keyed": {"envelope": "debezium"}}, "test")
    row = {"type": "struct", "optional": True, "fields": [{"type": "int64", "optional": False, "field": "id"},
                                                          {"type": "string", "optional": True, "field": "name"}]}
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                                           {"type": "string", "field": "op"}]}

    def event(op: str, before: dict | None, after: dict | None, lsn: int) -> bytes:
        payload = {"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": 1714558800000 + lsn}}
        return json.dumps({"schema": schema, "payload": payload}).encode()

    helpers.produce_pairs(topic, [(b'{"id": 1}', event("c", None, {"id": 1, "name": "a"}, 10)),
                                  (b'{"id": 2}', event("c", None, {"id": 2, "name": "b"}, 20))])
    run(spark, config)
    helpers.produce_pairs(topic, [(b'{"id": 2}', event("d", {"id": 2, "name": None}, None, 30))])
    run(spark, config)
    helpers.produce_pairs(topic, [(b'{"id": 2}', None)])
    plan = prepare_batch(config, props())
    assert [f.name for f in plan.format.fields] == ["id", "name"] and plan.format.keyed.keys == ("id",)
    execute_batch(spark, plan, props())
    assert [tuple(r.values()) for r in helpers.query(config.table_uri, "SELECT id, name FROM t")] == [(1, "a")]


def test_debezium_avro_change_events(kafka_bootstrap, schema_registry, spark, lake):
    """Debezium's envelope as Avro (the converter's shape: tests/unit/tidemark/avro_samples.py), decoded with the
    schema frozen from the registry; the same dead-letter rules as JSON, and a value that is not Avro says so once."""
    topic = helpers.create_topic(helpers.unique("keyed-dbz-avro"), partitions=1)
    schema = debezium_envelope({"name": "id", "type": ["null", "long"], "default": None},
                               {"name": "name", "type": ["null", "string"], "default": None},
                               table="shop.public.things")
    sid = helpers.register_schema(f"{topic}-value", schema)

    def event(op: str, before: dict | None, after: dict | None, lsn: int | None) -> bytes:
        source = {"version": "3.6.1.Final", "ts_ms": 1714558800000 + (lsn or 0), "snapshot": "false", "lsn": lsn}
        return helpers.avro_value(sid, schema, {"op": op, "before": before, "after": after, "source": source,
                                                "ts_ms": 1714558800999})

    one, two = {"id": 1, "name": "a"}, {"id": 2, "name": "x"}
    helpers.produce_pairs(topic, [
        (b"1", event("r", None, one, 10)), (b"1", event("u", one, {"id": 1, "name": "b"}, 20)),
        (b"2", event("c", None, two, 30)), (b"2", event("d", {"id": 2, "name": None}, None, 40)), (b"2", None),
        (b"3", event("c", None, {"id": 3, "name": "z"}, 50)),
        (b"x", event("t", None, None, 60)), (b"x", event("c", None, None, 70)),
        (b"x", event("c", None, {"id": 4, "name": "w"}, None)), (b"x", event("c", None, {"id": None, "name": "n"}, 80)),
        (b"x", b"\x00" + sid.to_bytes(4, "big") + b"\x02"), (b"x", b"\x01" + sid.to_bytes(4, "big"))])
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "avro",
                             "keyed": {"keys": ["id"], "envelope": "debezium"}}, "test")
    execute_batch(spark, prepare_batch(config, props(), schemas=RegistryClient(schema_registry)), props())
    rows = helpers.query(config.table_uri, "SELECT id, name, cdc_op, cdc_position, cdc_ts_ms FROM t ORDER BY id")
    assert [tuple(r.values()) for r in rows] == [(1, "b", "u", 20, 1714558800020), (3, "z", "c", 50, 1714558800050)]
    errors = {r["kafka_offset"]: r["error"] for r in helpers.query(config.dead_letter_uri,
                                                                    "SELECT kafka_offset, error FROM t")}
    assert errors == {6: "Debezium operation 't' is not a row change (c, u, r or d)",
                      7: "Debezium 'c' event without its after image",
                      8: "Debezium event without source.lsn or source.pos: no usable ordering",
                      9: "key field 'id' is missing or null",
                      10: f"the Avro body does not decode with schema id {sid}",
                      11: "magic byte is 1, not 0: not the Confluent wire format"}
    batch = [r for r in Ledger(settings.ledger_uri()).rows(topic) if r.kind == "batch"]
    assert [(r.record_count, r.dead_letter_count) for r in batch] == [(12, 6)]


def test_a_widened_column_of_a_keyed_table_is_widened_before_the_merge(kafka_bootstrap, spark, lake):
    """schema_changes on a keyed table: ``qty`` declared int, then bigint (a widening). The batch widens the
    column in a commit of its own (a MERGE cannot change a type), then MERGEs a value only a bigint holds;
    the rows already there keep their values."""
    topic = helpers.create_topic(helpers.unique("keyed-widen"), partitions=1)
    config, ref = keyed_pipeline(topic), Reference()
    produce(topic, ref, [change(1, "a", 1), change(2, "b", 2), change(3, "c", 3)])
    run(spark, config)
    produce(topic, ref, [change(2, "b2", 3_000_000_000), change(4, "d", 4), change(3, "TOMBSTONE")])
    run(spark, keyed_pipeline(topic, {**SCHEMA, "qty": "bigint?"}))
    assert table(config.table_uri) == ref.rows == {1: ("a", 1), 2: ("b2", 3_000_000_000), 4: ("d", 4)}
    assert dict(spark.read.format("delta").load(config.table_uri).dtypes)["qty"] == "bigint"
    history = sorted(DeltaTable(config.table_uri).history(), key=lambda c: c["version"])
    assert [c["operation"] for c in history] == ["WRITE", "WRITE", "MERGE"]
    assert json.loads(history[1]["userMetadata"])["tidemark_widening"] == {
        "pipeline": topic, "before_batch": 2, "columns": {"qty": "bigint"}}
    assert Ledger(settings.ledger_uri()).state(topic).last_batch_id == 2


def test_a_tombstone_with_an_avro_key_deletes_the_row_of_the_decoded_key(kafka_bootstrap, schema_registry, spark,
                                                                         lake):
    """A compacted topic of Avro records with Avro keys (``key_format: avro``): a tombstone's key fields come
    from the decoded key, a record holding them, not from the key's bytes."""
    topic = helpers.create_topic(helpers.unique("keyed-avro-key"), partitions=1)
    value = {"type": "record", "name": "Profile", "fields": [{"name": "id", "type": "long"},
                                                             {"name": "name", "type": ["null", "string"]}]}
    key = {"type": "record", "name": "ProfileKey", "fields": [{"name": "id", "type": "long"}]}
    vid, kid = helpers.register_schema(f"{topic}-value", value), helpers.register_schema(f"{topic}-key", key)

    def pair(k: int, name: str | None, tombstone: bool = False) -> tuple[bytes, bytes | None]:
        return helpers.avro_value(kid, key, {"id": k}), (None if tombstone else
                                                         helpers.avro_value(vid, value, {"id": k, "name": name}))

    helpers.produce_pairs(topic, [pair(1, "a"), pair(2, "b"), pair(3, "c"), pair(2, None, tombstone=True),
                                  pair(1, "a2")])
    config = parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "avro",
                             "key_format": "avro", "keyed": {"keys": ["id"]}}, "test")
    execute_batch(spark, prepare_batch(config, props(), schemas=RegistryClient(schema_registry)), props())
    helpers.produce_pairs(topic, [pair(3, None, tombstone=True), pair(4, "d")])
    execute_batch(spark, prepare_batch(config, props(), schemas=RegistryClient(schema_registry)), props())
    rows = helpers.query(config.table_uri, "SELECT id, name FROM t ORDER BY id")
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a2"), (4, "d")]
    assert helpers.query_or_none(config.dead_letter_uri) is None
