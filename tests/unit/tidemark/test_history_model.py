"""The reference model of history tables (tests/history_model.py) that tests/integration/test_history_generated.py
holds the real broker, Spark and Delta to: the contract on hand-computed streams (each with its rows, periods and
ledger counts), and, over generated cases, the shape of every key's history and two restatements of it: the
current rows are what a plain keyed table holds (tests/keyed_model.py), and the versions and their periods do
not depend on how the changes fall into batches."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.history_model import (
    MODES,
    PERIOD,
    HistoryModel,
    history_columns,
    history_pipeline_dict,
    replay,
    timestamp_millis,
)
from tests.keyed_model import KEYED, NOOP, TOMBSTONE, TS_BASE, Change, KeyedModel, cases, schedule
from tests.keyed_model import updated_at as at
from tests.unit.tidemark.test_keyed_model import dbz, delete, tomb, up

pytestmark = pytest.mark.unit

FAST = settings(max_examples=80, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def periods(model: HistoryModel, key: int = 1) -> list[tuple]:
    """A key's rows as (name, valid_from, valid_to, is_current), valid_* in seconds after keyed_model.EPOCH."""
    def seconds(when):
        return None if when is None else int((when - at(0)).total_seconds())
    return [(r["name"], seconds(r["valid_from"]), seconds(r["valid_to"]), r["is_current"])
            for r in model.table().get(key, [])]


# --- the contract, by hand ----------------------------------------------------------------------------------------


def test_a_late_upsert_splits_the_version_it_falls_in():
    model, counts = replay("order_by", [up(1, 10, name="a"), up(1, 20, name="c"), up(1, 15, batch=2, name="b")])
    assert periods(model) == [("a", 10, 15, False), ("b", 15, 20, False), ("c", 20, None, True)]
    assert counts == [(2, 0, 0), (1, 1, 0)]  # b in; a's valid_to moved from 20 to 15
    assert model.last_changes == {"inserted": [(1, (15,))], "updated": [(1, (10,))], "deleted": []}


def test_a_delete_closes_the_current_version_and_leaves_no_current_row():
    model, counts = replay("order_by", [up(1, 10, name="a"), delete(1, 20, batch=2)])
    assert periods(model) == [("a", 10, 20, False)]
    assert model.current() == {}
    assert counts == [(1, 0, 0), (0, 1, 0)]


def test_a_late_delete_closes_the_version_it_falls_in():
    model, counts = replay("order_by", [up(1, 10, name="a"), up(1, 20, name="c"), delete(1, 15, batch=2)])
    assert periods(model) == [("a", 10, 15, False), ("c", 20, None, True)]
    assert counts == [(2, 0, 0), (0, 1, 0)]


def test_a_delete_before_any_version_ends_a_late_upsert_older_than_it():
    model, counts = replay("order_by", [delete(1, 20), up(1, 10, batch=2, name="a")])
    assert periods(model) == [("a", 10, 20, False)]
    assert counts == [(0, 0, 0), (1, 0, 0)]  # the first batch creates a table of no row


def test_a_late_upsert_between_two_deletes_lives_until_the_second():
    model, counts = replay("order_by", [delete(1, 10), delete(1, 30), up(1, 20, batch=2, name="a"),
                                        up(1, 5, batch=2, name="early")])
    assert periods(model) == [("early", 5, 10, False), ("a", 20, 30, False)]
    assert counts == [(0, 0, 0), (2, 0, 0)]


def test_an_upsert_after_a_delete_starts_a_current_version_and_leaves_the_closed_one_alone():
    model, counts = replay("order_by", [up(1, 10, name="a"), delete(1, 20), up(1, 30, batch=2, name="b")])
    assert periods(model) == [("a", 10, 20, False), ("b", 30, None, True)]
    assert counts == [(1, 0, 0), (1, 0, 0)]


def test_at_an_equal_ordering_an_upsert_arriving_later_replaces_a_delete():
    model, counts = replay("order_by", [up(1, 10, name="a"), delete(1, 20), up(1, 20, batch=2, name="b")])
    assert periods(model) == [("a", 10, 20, False), ("b", 20, None, True)]
    assert counts == [(1, 0, 0), (1, 0, 0)]  # a's period is the same as before


def test_at_an_equal_ordering_a_delete_arriving_later_removes_the_version():
    model, counts = replay("order_by", [up(1, 10, name="a"), up(1, 20, name="b"), delete(1, 20, batch=2)])
    assert periods(model) == [("a", 10, 20, False)]  # a still ends at 20, now at the delete
    assert counts == [(2, 0, 0), (0, 0, 1)]
    assert model.last_changes["deleted"] == [(1, (20,))]


def test_at_an_equal_ordering_the_last_arrival_wins_within_a_batch_and_across_batches():
    model, counts = replay("order_by", [up(1, 10, name="first"), up(1, 10, name="second"),
                                        up(2, 10, name="kept"), delete(2, 10), up(2, 10, name="back"),
                                        up(3, 10, name="old"),
                                        up(3, 10, batch=2, name="new"), delete(3, 10, batch=2),
                                        up(3, 10, batch=2, name="newer")])
    assert [periods(model, k) for k in (1, 2, 3)] == [[("second", 10, None, True)], [("back", 10, None, True)],
                                                      [("newer", 10, None, True)]]
    assert model.table()[1][0]["kafka_offset"] == 3  # round-robin: first, kept, old, second
    assert counts == [(3, 0, 0), (0, 1, 0)]  # 3's version is there before and after, with another payload


def test_the_same_upsert_again_is_an_update_for_its_coordinates():
    model, counts = replay("order_by", [up(1, 10, name="a"), up(1, 10, batch=2, name="a")])
    assert periods(model) == [("a", 10, None, True)]
    assert model.table()[1][0]["ingest_batch_id"] == 2 and counts == [(1, 0, 0), (0, 1, 0)]


def test_an_order_by_tombstone_is_a_bad_record_and_changes_nothing():
    model, counts = replay("order_by", [up(1, 10, name="a"), tomb(1), tomb(1, batch=2, text=True),
                                        delete(2, 5, batch=2), tomb(2, batch=2)])
    assert periods(model) == [("a", 10, None, True)] and model.table().keys() == {1}
    assert counts == [(1, 0, 0), (0, 0, 0)]
    assert model.last_bad == 2  # batch 2's two tombstones
    assert replay("order_by", [tomb(1)])[1] == [(0, 0, 0)]


def test_a_debezium_redelivery_replaces_its_version_with_its_own_coordinates():
    c, u = dbz(1, "c", 10, 5, name="a"), dbz(1, "u", 20, 7, name="b")
    model, counts = replay("debezium", [c, u, dbz(1, "d", 30, 9), Change(1, 1, NOOP),
                                        replace(c, batch=2, redelivered=True), Change(1, 2, NOOP)])
    rows = model.table()[1]
    assert [(r["name"], r["valid_from"], r["valid_to"], r["is_current"]) for r in rows] == [
        ("a", timestamp_millis(TS_BASE + 5), timestamp_millis(TS_BASE + 7), False),
        ("b", timestamp_millis(TS_BASE + 7), timestamp_millis(TS_BASE + 9), False)]  # valid_* are ts_ms
    assert rows[0] | {"valid_from": None, "valid_to": None} == {
        "id": 1, "name": "a", "qty": None, "kafka_topic": "t", "kafka_partition": 0, "kafka_offset": 4,
        "ingest_batch_id": 2, "cdc_op": "c", "cdc_position": 10, "cdc_ts_ms": TS_BASE + 5,
        "valid_from": None, "valid_to": None, "is_current": False}
    assert counts == [(2, 0, 0), (0, 1, 0)]  # the redelivery's offset and batch; Debezium's tombstones: nothing
    assert model.last_bad == 0


def test_debezium_orders_by_lsn_then_ts_ms():
    model, _ = replay("debezium", [dbz(1, "u", 20, 9, name="later"), dbz(1, "c", 20, 3, name="first"),
                                   dbz(1, "u", 10, 1, name="oldest")])
    assert [r["name"] for r in model.table()[1]] == ["oldest", "first", "later"]
    assert model.table()[1][0]["valid_to"] == timestamp_millis(TS_BASE + 3)
    assert timestamp_millis(TS_BASE + 3) == dt.datetime(2024, 5, 1, 10, 20, 0, 3000, tzinfo=dt.UTC)


def test_a_debezium_time_that_goes_back_takes_the_latest_before_it():
    """source.ts_ms need not grow with the position (a snapshot's reads, a clock step): an event's time is the
    latest of its own and those before it by the ordering, so the intervals never overlap."""
    model, _ = replay("debezium", [dbz(1, "c", 10, 5, name="a"), dbz(1, "u", 20, 9, name="b"),
                                   dbz(1, "u", 30, 7, name="c")])
    ms = [timestamp_millis(TS_BASE + n) for n in (5, 9)]
    assert [(r["name"], r["valid_from"], r["valid_to"], r["is_current"]) for r in model.table()[1]] == [
        ("a", ms[0], ms[1], False), ("b", ms[1], ms[1], False), ("c", ms[1], None, True)]


def test_the_ledger_counts_versions_across_keys():
    first = [up(1, 10), up(1, 20), up(2, 10), up(3, 10), up(4, 10, name="same")]
    model, counts = replay("order_by", [*first, up(1, 15, batch=2), delete(2, 10, batch=2), delete(3, 5, batch=2),
                                        up(4, 10, batch=2, name="same"), up(5, 1, batch=2), delete(5, 1, batch=2),
                                        delete(6, 3, batch=2)], partitions=3)
    # 1: a version in, the one before it ends earlier; 2: its version deleted; 3: a delete before its version
    # changes no row; 4: the same upsert again (new coordinates); 5: in and out within the batch; 6: no row
    assert counts == [(5, 0, 0), (1, 2, 1)]
    assert model.last_changes == {"inserted": [(1, (15,))], "updated": [(1, (10,)), (4, (10,))],
                                  "deleted": [(2, (10,))]}


def test_rows_hold_a_keyed_tables_columns_and_the_period():
    model, _ = replay("order_by", [up(5, 3), up(8, 2), up(5, 4, batch=2, name="five")], partitions=3)
    assert model.table()[5][1] == {
        "id": 5, "name": "five", "qty": 4, "op": None, "updated_at": at(4), "kafka_topic": "t",
        "kafka_partition": 2, "kafka_offset": 2, "ingest_batch_id": 2, "valid_from": at(4), "valid_to": None,
        "is_current": True}
    assert all(set(row) == set(history_columns("order_by")) for rows in model.table().values() for row in rows)


def test_the_pipeline_asks_for_scd2_and_only_with_an_ordering():
    assert history_pipeline_dict("debezium", "t")["keyed"] == {"keys": ["id"], "envelope": "debezium",
                                                               "history": "scd2"}
    assert "history" not in KEYED["order_by"]  # keyed_model's own dict left as it was
    with pytest.raises(ValueError, match="ordering"):
        HistoryModel("position")


# --- the generated cases --------------------------------------------------------------------------------------------


@FAST
@given(st.sampled_from(MODES).flatmap(lambda m: cases(m, 3, max_keys=8)))
def test_every_keys_history_is_ordered_with_at_most_one_current_row_last(case):
    model, counts = replay(case.mode, case.changes, case.partitions)
    for rows in model.table().values():
        for row, following in zip(rows, rows[1:], strict=False):
            assert row["valid_from"] < following["valid_from"] and not row["is_current"]
            assert row["valid_to"] is not None and row["valid_from"] < row["valid_to"] <= following["valid_from"]
        assert rows[-1]["is_current"] == (rows[-1]["valid_to"] is None)
    assert sum(i - d for i, _, d in counts) == len(model.rows())


@FAST
@given(st.sampled_from(MODES).flatmap(lambda m: cases(m, 3, max_keys=8)))
def test_the_current_rows_are_what_a_keyed_table_holds(case):
    """The same records through keyed_model, less the order_by tombstones (bad records here): each key's
    current row is its keyed row, coordinates included."""
    model, _ = replay(case.mode, case.changes, case.partitions)
    keyed = KeyedModel(case.mode)
    for b, records in enumerate(schedule(case), start=1):
        for r in records:
            if r.change.kind != TOMBSTONE:
                keyed.apply(r.change, r.partition, r.offset, b)
        keyed.end_batch()
    assert model.current() == keyed.table()


@FAST
@given(st.sampled_from(MODES).flatmap(lambda m: cases(m, 3, max_keys=8)))
def test_the_versions_do_not_depend_on_the_batches(case):
    """Every change in one batch leaves the same versions with the same periods and payloads (the coordinates
    differ: the records interleave otherwise)."""
    def versions(changes):
        model, _ = replay(case.mode, changes, case.partitions)
        return {v: {c: x for c, x in row.items() if c in (*PERIOD, "name", "qty", "op", "cdc_op")}
                for v, row in model.rows().items()}
    assert versions(case.changes) == versions([replace(c, batch=1) for c in case.changes])

