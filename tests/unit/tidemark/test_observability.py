"""What operators watch, computed in the core (tidemark.observe.measurements): durations in pipeline files, the
open-transaction hold warnings, and the metrics' values, names and documentation."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from tidemark.config.pipeline import parse_pipeline
from tidemark.errors import ConfigError
from tidemark.ledger.state import RowChanges
from tidemark.observe.measurements import (
    METRICS,
    batch_measurements,
    hold_warnings,
    pipeline_measurements,
)

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "OPERATIONS.md"


def pipeline(**extra):
    return parse_pipeline({"name": "orders", "topics": ["orders"], "table": "orders", **extra}, "orders.yaml")


@pytest.mark.parametrize(("text", "expected"), [("30s", dt.timedelta(seconds=30)), ("15m", dt.timedelta(minutes=15)),
                                                ("2h", dt.timedelta(hours=2)), ("1d", dt.timedelta(days=1)),
                                                ("PT2H", dt.timedelta(hours=2)), ("90s", dt.timedelta(seconds=90))])
def test_durations_read_as_people_write_them(text, expected):
    assert pipeline(freshness_sla=text).freshness_sla == expected
    assert pipeline(lag={"hold_warning_after": text}).lag.hold_warning_after == expected


def test_the_defaults_warn_after_15_minutes_and_set_no_freshness_sla():
    config = pipeline()
    assert config.lag.hold_warning_after == dt.timedelta(minutes=15)
    assert config.freshness_sla is None
    assert config.freshness_alert.callback == "tidemark_airflow.alerts.log_stale_pipeline"


@pytest.mark.parametrize(("extra", "message"), [
    ({"freshness_sla": "2 hours"}, "'freshness_sla': '2 hours' is not a duration: give a number and a unit"),
    ({"freshness_sla": "0s"}, "'freshness_sla': Input should be greater than"),
    ({"freshness_sla": 90}, "'freshness_sla': 90 has no unit (seconds? hours?): write it with one, 90s, 90m, 90h"),
    ({"lag": {"hold_warning_after": "5x"}}, "'lag.hold_warning_after': '5x' is not a duration"),
    ({"lag": {"warn": "5m"}}, "unknown key 'lag.warn'"),
    ({"freshness_alert": {"callback": "page_me"}}, "'freshness_alert.callback': String should match pattern"),
])
def test_bad_values_are_refused_naming_the_file_and_the_field(extra, message):
    with pytest.raises(ConfigError, match=re.escape(f"orders.yaml: {message}")):
        pipeline(**extra)


def row(partition, lag, held=0, since=None):
    return {"topic": "orders", "partition": partition, "committed_offset": 0, "latest_offset": lag, "lag": lag,
            "last_batch_id": 1, "held_by_open_transactions": held, "held_since": since}


ROWS = [row(0, 3, held=154, since=(NOW - dt.timedelta(minutes=20)).isoformat()),
        row(1, 4, held=7, since=(NOW - dt.timedelta(minutes=5)).isoformat()), row(2, 0)]


def test_a_hold_older_than_hold_warning_after_is_warned_about_naming_the_partition_and_what_to_do():
    warnings = hold_warnings("orders", ROWS, dt.timedelta(minutes=15), NOW)
    assert len(warnings) == 1
    assert warnings[0].startswith("pipeline 'orders': orders:0 has 154 offset(s) held back by a transaction open for "
                                  "20m00s (over hold_warning_after, 15m00s)")
    assert "kafka-transactions.sh" in warnings[0]
    assert len(hold_warnings("orders", ROWS, dt.timedelta(minutes=1), NOW)) == 2
    assert hold_warnings("orders", [row(0, 3, held=9, since=None)], dt.timedelta(0), NOW) == []  # undated: no age


def test_pipeline_measurements_per_partition_and_in_total():
    sent = {(m.name, tuple(m.tags.values())): (m.kind, m.value)
            for m in pipeline_measurements("orders", [*ROWS, {**row(3, None), "lag": None}], 42.5, NOW)}
    assert sent == {
        ("tidemark.partition_lag", ("orders", "orders", "0")): ("gauge", 3),
        ("tidemark.partition_lag", ("orders", "orders", "1")): ("gauge", 4),
        ("tidemark.partition_lag", ("orders", "orders", "2")): ("gauge", 0),
        ("tidemark.partition_held_by_open_transactions", ("orders", "orders", "0")): ("gauge", 154),
        ("tidemark.partition_held_by_open_transactions", ("orders", "orders", "1")): ("gauge", 7),
        ("tidemark.partition_held_by_open_transactions", ("orders", "orders", "2")): ("gauge", 0),
        ("tidemark.total_lag", ("orders",)): ("gauge", 7),
        ("tidemark.held_by_open_transactions", ("orders",)): ("gauge", 161),
        ("tidemark.hold_age_seconds", ("orders",)): ("gauge", 1200.0),
        ("tidemark.freshness_seconds", ("orders",)): ("gauge", 42.5),
    }  # partition 3 (latest offset unknown) sends nothing
    assert "tidemark.freshness_seconds" not in {m.name for m in pipeline_measurements("orders", ROWS, None, NOW)}


def test_batch_measurements_and_legacy_names_carry_the_tags_values():
    sent = batch_measurements("shop.orders", 1000, 3, 12.5)
    assert [(m.name, m.kind, m.value) for m in sent] == [
        ("tidemark.batch_records", "count", 1000), ("tidemark.batch_dead_letters", "count", 3),
        ("tidemark.batch_duration", "timing", 12500.0)]
    assert sent[0].legacy_name == "tidemark.batch_records.shop__orders"  # dots in values, as Airflow's own
    part = pipeline_measurements("orders", ROWS, None, NOW)[0]
    assert part.legacy_name == "tidemark.partition_lag.orders.orders.0"


def test_a_keyed_batch_also_sends_the_rows_its_merge_inserted_updated_and_deleted():
    sent = batch_measurements("customers", 12, 1, None, RowChanges(inserted=4, updated=6, deleted=2))
    assert [(m.name, m.kind, m.value) for m in sent] == [
        ("tidemark.batch_records", "count", 12), ("tidemark.batch_dead_letters", "count", 1),
        ("tidemark.batch_rows_inserted", "count", 4), ("tidemark.batch_rows_updated", "count", 6),
        ("tidemark.batch_rows_deleted", "count", 2)]
    assert sent[-1].legacy_name == "tidemark.batch_rows_deleted.customers"
    assert not any("rows" in m.name for m in batch_measurements("orders", 12, 1, None))  # an append: none


def test_a_transformed_batch_also_sends_the_records_its_transform_filtered_out():
    sent = batch_measurements("orders", 12, 1, None, filtered=5)
    assert [(m.name, m.kind, m.value) for m in sent][-1] == ("tidemark.batch_filtered", "count", 5)
    assert sent[-1].legacy_name == "tidemark.batch_filtered.orders"
    assert batch_measurements("orders", 12, 1, None, filtered=0)[-1].value == 0  # sent: none filtered is news too
    assert not any("filtered" in m.name for m in batch_measurements("orders", 12, 1, None))  # no transform: none


def test_every_metric_sent_is_listed_and_documented_with_its_type_and_tags():
    sent = {m.name: (m.kind, tuple(m.tags)) for m in
            [*pipeline_measurements("orders", ROWS, 1.0, NOW), *batch_measurements("orders", 1, 0, 1.0, (1, 2, 3), 4)]}
    assert sent == {spec.name: (spec.kind, spec.tags) for spec in METRICS}
    doc = OPERATIONS.read_text()
    for spec in METRICS:
        assert re.search(rf"^\| `{re.escape(spec.name)}` \| {spec.kind} \| {re.escape(', '.join(spec.tags))} \|",
                         doc, re.M), f"docs/OPERATIONS.md lists no row for {spec.name} ({spec.kind}; {spec.tags})"
