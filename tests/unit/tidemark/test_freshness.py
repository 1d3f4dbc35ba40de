"""How fresh the output is (tidemark.observe.freshness): the newest kafka_timestamp from the Delta log's file
statistics, on a real Delta table (delta-rs on the local disk)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from deltalake import write_deltalake

from tidemark.observe.freshness import freshness_seconds, hold_started, newest_record_time


def write(path, *times):
    column = pa.array(times, pa.timestamp("us", tz="UTC"))
    write_deltalake(str(path), pa.table({"kafka_timestamp": column, "value": [b"x"] * len(times)}), mode="append")


def test_the_newest_record_time_comes_from_the_file_statistics_of_every_file(tmp_path):
    table = tmp_path / "orders"
    assert newest_record_time(str(table)) is None  # no table yet
    write(table, dt.datetime(2026, 11, 26, 9, 0, tzinfo=dt.UTC), dt.datetime(2026, 11, 26, 10, 30, tzinfo=dt.UTC))
    write(table, dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.UTC))  # a later file with older records
    assert newest_record_time(str(table)) == dt.datetime(2026, 11, 26, 10, 30, tzinfo=dt.UTC)
    assert freshness_seconds(str(table), now=dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)) == 5400.0


def test_a_table_without_a_kafka_timestamp_column_has_no_known_freshness(tmp_path):
    write_deltalake(str(tmp_path / "other"), pa.table({"value": [1]}))
    assert freshness_seconds(str(tmp_path / "other")) is None


def test_nothing_held_asks_kafka_nothing():
    assert hold_started({"bootstrap.servers": "127.0.0.1:1"}, {}) == {}
