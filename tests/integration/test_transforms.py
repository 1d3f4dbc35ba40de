"""SQL transforms (issue 40) against the real broker, Spark and Delta: a derive-and-rename, a filter (its
count in the ledger, the audit clean, a kill -9 between the output commit and the ledger's), an explode (the
audit clean, a backfill of the same window and a replay of the topic adding nothing, each counting its filtering),
and every bad transform refused before anything
is written. Exactly once is checked by coordinates: every produced good record's (partition, offset) is in
the output (with all its rows) or counted as filtered, none twice across batches."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.integration.test_crash_points import recover, tidemark_run
from tidemark import fault_injection, settings
from tidemark.audit.live_table import audit_tables, summary
from tidemark.batch.backfill import BackfillRequest, prepare_backfill
from tidemark.batch.execute import execute_batch
from tidemark.batch.prepare import prepare_batch
from tidemark.batch.reset import ResetRequest, reset_offsets
from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import TransformError
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.store import Ledger

pytestmark = pytest.mark.integration

SCHEMA = {"order_id": "bigint", "amount": "decimal(10,2)", "country": "string", "is_test": "boolean?",
          "items": "string?"}
COORDS = "kafka_topic, kafka_partition, kafka_offset"


def props() -> dict[str, str]:
    return {"bootstrap.servers": helpers.bootstrap()}


def pipeline_data(topic: str, transform: str, **extra) -> dict:
    return {"name": topic, "topics": [topic], "table": topic, "value_format": "json", "value_schema": SCHEMA,
            "transform": transform, **extra}


def pipeline(topic: str, transform: str, **extra):
    return parse_pipeline(pipeline_data(topic, transform, **extra), "test")


def order(i: int, *, test: bool = False, items: str | None = "a,b", country: str = "fr") -> bytes:
    return json.dumps({"order_id": i, "amount": f"{i % 1000}.25", "country": country, "is_test": test,
                       "items": items}).encode()


def run(spark, config):
    plan = prepare_batch(config, props())
    if not plan.is_empty:
        execute_batch(spark, plan, props())
    return plan


def ledger_rows(topic: str) -> list[tuple]:
    return sorted((r.batch_id, r.partition, r.record_count, r.dead_letter_count, r.filtered_count)
                  for r in Ledger(settings.ledger_uri()).rows(topic) if r.kind in ("batch", "backfill"))


def audit(config):
    return audit_tables(config.name, config.table_uri, config.dead_letter_uri, settings.ledger_uri(),
                        transformed=True)


def test_a_derive_and_rename_writes_the_selected_columns_once_per_record(kafka_bootstrap, spark, lake):
    import pyarrow as pa
    from deltalake import write_deltalake

    topic = helpers.create_topic(helpers.unique("tf-derive"), partitions=2)
    countries = str(lake / "countries")  # a table the query joins, named by its path
    write_deltalake(countries, pa.table({"code": ["fr", "de"], "name": ["France", "Germany"]}))
    config = pipeline(topic, f"""
        SELECT {COORDS}, kafka_timestamp, order_id AS id, amount * 2 AS doubled, upper(country) AS country,
               c.name AS country_name
        FROM records r LEFT JOIN delta.`{countries}` c ON r.country = c.code  -- a comment; a ';' in a string: 'x;y'
    """)
    helpers.produce_values(topic, [order(i) for i in range(5)], partition=0)
    helpers.produce_values(topic, [order(i) for i in range(5, 8)] + [b"not json"], partition=1)
    run(spark, config)

    rows = helpers.query(config.table_uri, "SELECT * FROM t ORDER BY kafka_partition, kafka_offset")
    assert list(rows[0]) == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "id", "doubled",
                             "country", "country_name", "ingest_batch_id", "ingested_at"]
    assert [(r["kafka_partition"], r["kafka_offset"], r["id"], str(r["doubled"]), r["country"], r["country_name"],
             r["ingest_batch_id"]) for r in rows] == [(0, o, o, f"{2 * o}.50", "FR", "France", 1) for o in range(5)] + \
        [(1, o, 5 + o, f"{2 * (5 + o)}.50", "FR", "France", 1) for o in range(3)]
    dead = helpers.query(config.dead_letter_uri, "SELECT kafka_partition, kafka_offset, CAST(value AS STRING) AS v "
                                                 "FROM t")
    assert dead == [{"kafka_partition": 1, "kafka_offset": 3, "v": "not json"}]  # untransformed
    assert ledger_rows(topic) == [(1, 0, 5, 0, 0), (1, 1, 4, 1, 0)]
    assert audit(config).ok


def test_a_filter_counts_what_it_drops_and_a_kill_before_the_ledger_commit_keeps_the_counts(
        kafka_bootstrap, spark, spark_connect, lake, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    env = helpers.service_env(pipelines, lake, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(
        spark_connect))
    topic = helpers.create_topic(helpers.unique("tf-filter"), partitions=2)
    transform = "SELECT * FROM records WHERE NOT coalesce(is_test, false)"
    (pipelines / f"{topic}.yaml").write_text(json.dumps(pipeline_data(topic, transform)))
    config = pipeline(topic, transform)
    helpers.produce_values(topic, [order(i, test=i % 3 == 0) for i in range(9)], partition=0)  # 0, 3, 6 dropped
    helpers.produce_values(topic, [order(i, test=True) for i in range(2)], partition=1)  # everything dropped
    run(spark, config)
    assert ledger_rows(topic) == [(1, 0, 9, 0, 3), (1, 1, 2, 0, 2)]
    assert helpers.query(config.table_uri, f"SELECT {COORDS} FROM t ORDER BY kafka_offset") == [
        {"kafka_topic": topic, "kafka_partition": 0, "kafka_offset": o} for o in (1, 2, 4, 5, 7, 8)]

    # batch 2, killed between its output commit and its ledger commit: the roll-forward reads the good records
    # from the output commit's metadata, and finds the filtered ones again
    helpers.produce_values(topic, [order(i, test=i == 10) for i in range(10, 13)], partition=0)
    helpers.produce_values(topic, [order(20), order(21, test=True)], partition=1)
    crashed, _ = tidemark_run({**env, "TIDEMARK_CRASH_AT": fault_injection.AFTER_OUTPUT_COMMIT,
                               "TIDEMARK_CRASH_ONCE": str(tmp_path / "crashed")}, topic)
    assert (tmp_path / "crashed").exists(), crashed.stderr[-3000:]
    assert Ledger(settings.ledger_uri()).state(topic).pending_batch_id == 2
    recover(spark, topic, env, "spark-connect")
    assert ledger_rows(topic) == [(1, 0, 9, 0, 3), (1, 1, 2, 0, 2), (2, 0, 3, 0, 1), (2, 1, 2, 0, 1)]
    got = helpers.query(config.table_uri, "SELECT kafka_partition AS p, kafka_offset AS o, COUNT(*) AS n, "
                                          "COUNT(DISTINCT ingest_batch_id) AS b FROM t GROUP BY 1, 2 ORDER BY 1, 2")
    assert [(r["p"], r["o"]) for r in got] == [(0, o) for o in (1, 2, 4, 5, 7, 8, 10, 11)] + [(1, 2)]
    assert all(r["n"] == 1 and r["b"] == 1 for r in got)
    report = audit(config)
    assert report.ok, report.to_dict()


def test_an_explode_gives_rows_per_item_and_a_backfill_of_the_window_adds_nothing(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("tf-explode"), partitions=1)
    config = pipeline(topic, "SELECT *, explode(split(nullif(items, ''), ',')) AS item FROM records")
    values = [order(0, items="a,b,c"), order(1, items="d"), order(2, items=""), order(3, items=None),
              order(4, items="e,f")]
    helpers.produce_values(topic, values, partition=0)
    run(spark, config)
    rows = helpers.query(config.table_uri, "SELECT kafka_offset AS o, item FROM t ORDER BY o, item")
    assert [(r["o"], r["item"]) for r in rows] == [(0, "a"), (0, "b"), (0, "c"), (1, "d"), (4, "e"), (4, "f")]
    assert ledger_rows(topic) == [(1, 0, 5, 0, 2)]  # offsets 2 and 3: no row
    assert audit(config).ok
    version = helpers.table_version(config.table_uri)

    backfill = prepare_backfill(config, props(), BackfillRequest(offsets={TopicPartition(topic, 0): (0, 5)}),
                                owner="test")
    execute_batch(spark, backfill, props())
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n FROM t") == [{"n": 6}]
    # the two filtered records are read and filtered again: an empty commit carries the backfill's marker and counts
    assert helpers.table_version(config.table_uri) == version + 1
    report = audit(config)
    assert report.ok and report.duplicated_offsets == 0, report.to_dict()
    assert ledger_rows(topic)[-1][1:] == (0, 2, 0, 2)  # the backfill read 2 records (the rest are in the output)

    # a replay of the topic does the same, and the audit's filtered counts each batch's filtering (docs/DESIGN.md,
    # Counts are per batch): 2 by batch 1, 2 by the backfill, 2 by the replay, 6 rows and records as they were
    reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="replay test", owner="test"))
    run(spark, config)
    assert ledger_rows(topic)[-1] == (4, 0, 2, 0, 2)  # batch 3 is the reset
    report = audit(config)
    assert report.ok and (report.records, report.filtered) == (6, 6), report.to_dict()
    assert "(6 filtered by the transform, counted in each batch that read them)" in summary(report)


REFUSED = [
    ("SELECT * FROM records WHERE (", "the transform does not run"),
    ("SELECT *, no_such_column FROM records", "no_such_column"),
    ("SELECT kafka_topic, kafka_partition, order_id FROM records", "does not carry kafka_offset"),
    ("SELECT kafka_topic, kafka_partition, kafka_offset + 1 AS kafka_offset FROM records",
     "does not carry kafka_offset"),
    ("SELECT kafka_topic, kafka_offset AS kafka_partition, kafka_partition AS kafka_offset FROM records",
     "does not carry kafka_partition, kafka_offset"),
    ("SELECT *, CAST(country AS INT) AS n FROM records", "a record fails the transform"),
    ("SELECT kafka_topic, kafka_partition, kafka_offset, 'x' AS amount FROM records",
     "column 'amount' is string in the transform's output but decimal(10,2) in the table"),
    ("SELECT *, country AS COUNTRY FROM records", "names a column twice"),
]


def test_a_transform_that_cannot_run_is_refused_before_anything_is_written(kafka_bootstrap, spark, lake):
    """Each case in turn on one table and one planned batch (a refused batch stays planned: the next case's
    run takes it over, as the next run after a fix would)."""
    topic = helpers.create_topic(helpers.unique("tf-bad"), partitions=1)
    first = pipeline(topic, "SELECT * FROM records")
    helpers.produce_values(topic, [order(1)], partition=0)
    run(spark, first)  # the table exists, with the decoded columns
    version = helpers.table_version(first.table_uri)
    helpers.produce_values(topic, [order(2), order(3, country="x"), b"poison"], partition=0)
    for transform, says in REFUSED:
        plan = prepare_batch(pipeline(topic, transform), props(), owner="the same run, retried")
        with pytest.raises(TransformError, match="Nothing was") as refused:
            execute_batch(spark, plan, props())
        assert says in str(refused.value) and f"pipeline '{topic}'" in str(refused.value), transform
        assert not refused.value.transient
        if "CAST" in transform:
            assert f"{topic}:0 at offset 1" in str(refused.value)  # the first record that fails: order 2 ("fr")
        assert helpers.table_version(first.table_uri) == version, transform
        assert helpers.query_or_none(first.dead_letter_uri) is None, transform  # not even the dead letters
        state = Ledger(settings.ledger_uri()).state(topic)
        assert state.pending_batch_id == 2 and state.positions[TopicPartition(topic, 0)] == 1
    execute_batch(spark, prepare_batch(first, props(), owner="the same run, retried"), props())  # fixed: it lands once
    assert helpers.query(first.table_uri, f"SELECT {COORDS} FROM t ORDER BY kafka_offset") == [
        {"kafka_topic": topic, "kafka_partition": 0, "kafka_offset": o} for o in range(3)]
    assert ledger_rows(topic) == [(1, 0, 1, 0, 0), (2, 0, 3, 1, 0)]


def test_a_transform_that_widens_a_column_widens_it_in_place(kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("tf-widen"), partitions=1)
    helpers.produce_values(topic, [order(1)], partition=0)
    unpartitionable = pipeline(topic, "SELECT * FROM records", partition_by=["region"])
    with pytest.raises(TransformError, match="partition_by names region, which the transform's output lacks"):
        execute_batch(spark, prepare_batch(unpartitionable, props(), owner="test widen"), props())
    assert helpers.query_or_none(unpartitionable.table_uri) is None
    narrow = pipeline(topic, f"SELECT {COORDS}, CAST(order_id AS INT) AS id FROM records")
    execute_batch(spark, prepare_batch(narrow, props(), owner="test widen"), props())  # the same batch, fixed
    helpers.produce_values(topic, [order(3_000_000_000)], partition=0)
    config = pipeline(topic, f"SELECT {COORDS}, order_id AS id FROM records")  # bigint now
    run(spark, config)
    assert helpers.query(config.table_uri, "SELECT kafka_offset AS o, id FROM t ORDER BY o") == [
        {"o": 0, "id": 1}, {"o": 1, "id": 3_000_000_000}]
    assert dict(spark.read.format("delta").load(config.table_uri).dtypes)["id"] == "bigint"
    assert ledger_rows(topic) == [(1, 0, 1, 0, 0), (2, 0, 1, 0, 0)]


KEYED_SCHEMA = {"id": "bigint", "name": "string?", "qty": "int?", "op": "string?"}


def keyed_pipeline(topic: str, transform: str):
    return parse_pipeline({"name": topic, "topics": [topic], "table": topic, "value_format": "json",
                           "value_schema": KEYED_SCHEMA, "transform": transform,
                           "keyed": {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"]}}, "test")


def change(key: int, name: str | None = None, qty: int | None = None, op: str | None = None):
    if name == "TOMBSTONE":
        return json.dumps({"id": key}).encode(), None
    return json.dumps({"id": key}).encode(), json.dumps({"id": key, "name": name, "qty": qty, "op": op}).encode()


def test_a_keyed_table_merges_the_transformed_upserts_and_the_deletes_and_a_replay_changes_nothing(
        kafka_bootstrap, spark, lake):
    topic = helpers.create_topic(helpers.unique("tf-keyed"), partitions=1)
    transform = ("SELECT kafka_topic, kafka_partition, kafka_offset, id, upper(name) AS name, qty * 10 AS qty10 "
                 "FROM records WHERE name <> 'test'")
    config = keyed_pipeline(topic, transform)
    helpers.produce_pairs(topic, [change(1, "a", 1), change(2, "b", 2), change(3, "test", 3), change(1, "a2", 4),
                                  change(4, "d", 5)])
    run(spark, config)
    table = lambda: {r["id"]: (r["name"], r["qty10"]) for r in  # noqa: E731
                     helpers.query(config.table_uri, "SELECT id, name, qty10 FROM t")}
    assert table() == {1: ("A2", 40), 2: ("B", 20), 4: ("D", 50)}  # 3 filtered: never inserted
    # a filtered upsert of a key the table holds changes nothing; a tombstone and an op delete remove their keys
    helpers.produce_pairs(topic, [change(2, "test", 99), change(4, "TOMBSTONE"), change(1, op="delete"),
                                  change(5, "e", 6)])
    run(spark, config)
    assert table() == {2: ("B", 20), 5: ("E", 60)}
    assert ledger_rows(topic) == [(1, 0, 5, 0, 1), (2, 0, 4, 0, 1)]
    assert helpers.query(config.table_uri, "SELECT COUNT(*) AS n FROM t") == [{"n": 2}]

    version = helpers.table_version(config.table_uri)
    reset_offsets(config, props(), ResetRequest("to-earliest", execute=True, reason="replay test", owner="test"))
    run(spark, config)
    assert table() == {2: ("B", 20), 5: ("E", 60)}
    assert helpers.table_version(config.table_uri) <= version + 1  # at most an empty MERGE
    report = audit_tables(config.name, config.table_uri, config.dead_letter_uri, settings.ledger_uri(), keys=["id"],
                          transformed=True)
    assert report.ok and report.duplicate_key_rows == 0, report.to_dict()

    dropped_key = keyed_pipeline(topic, "SELECT kafka_topic, kafka_partition, kafka_offset, name FROM records")
    helpers.produce_pairs(topic, [change(6, "f", 7)])
    with pytest.raises(TransformError, match="must keep the keys and ordering fields as decoded.*id is missing"):
        execute_batch(spark, prepare_batch(dropped_key, props(), owner="test keyed"), props())
    exploded = keyed_pipeline(topic, "SELECT kafka_topic, kafka_partition, kafka_offset, id, upper(name) AS name, "
                                     "qty * 10 AS qty10, explode(array(1, 2)) AS copy FROM records")
    with pytest.raises(TransformError, match="gave a record 2 rows"):
        execute_batch(spark, prepare_batch(exploded, props(), owner="test keyed"), props())
    assert table() == {2: ("B", 20), 5: ("E", 60)}
