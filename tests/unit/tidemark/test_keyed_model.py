"""The reference model of keyed tables (tests/keyed_model.py) that tests/integration/test_keyed_generated.py holds
the real broker, Spark and Delta to: the contract's rules one by one on hand-written streams, the ledger counts,
where the records land in Kafka and what they hold, the generated cases' shape, and two restatements of the
model's outcome that need no state (the last change by position; the newest by ordering when no tombstone)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.vendor.pretty import pretty

from tests.keyed_model import (
    DELETE,
    MODES,
    NOOP,
    TOMBSTONE,
    TS_BASE,
    UPSERT,
    Case,
    Change,
    KeyedModel,
    cases,
    columns,
    encode,
    pipeline_dict,
    schedule,
)
from tidemark.config.pipeline import parse_pipeline

pytestmark = pytest.mark.unit

FAST = settings(max_examples=60, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def up(key: int, order: int | None = None, batch: int = 1, name: str | None = None) -> Change:
    return Change(key, batch, UPSERT, None if order is None else (order,), name or f"{key}@{order}", order, None)


def delete(key: int, order: int | None = None, batch: int = 1) -> Change:
    return Change(key, batch, DELETE, None if order is None else (order,), None, None, "delete")


def tomb(key: int, batch: int = 1, text: bool = False) -> Change:
    return Change(key, batch, TOMBSTONE, key_text=text)


def dbz(key: int, op: str, lsn: int, ts: int = 0, batch: int = 1, name: str | None = None) -> Change:
    kind = DELETE if op == "d" else UPSERT
    return Change(key, batch, kind, (lsn, TS_BASE + ts), name or f"{key}@{lsn}", None, op)


def replay(mode: str, changes: list[Change], partitions: int = 1) -> tuple[KeyedModel, list[tuple[int, int, int]]]:
    """The model after every change, batch by batch, and each batch's ledger counts."""
    case = Case(mode, partitions, tuple(changes))
    model = KeyedModel(mode)
    counts = [model.apply_batch(records, b) for b, records in enumerate(schedule(case), start=1)]
    return model, counts


def names(model: KeyedModel) -> dict[int, str]:
    return {k: row["name"] for k, row in model.table().items()}


# --- the rules ----------------------------------------------------------------------------------------------------


def test_by_position_every_upsert_applies_and_every_delete_or_tombstone_removes_the_row():
    model, counts = replay("position", [up(1, name="a"), up(1, name="b"), up(2, name="x"), delete(2), up(3, name="y"),
                                        tomb(3, text=True), up(4, name="p", batch=2), tomb(4, batch=2),
                                        up(4, name="q", batch=2), tomb(1, batch=2), up(2, name="z", batch=2)])
    assert names(model) == {2: "z", 4: "q"}
    assert counts == [(1, 0, 0), (2, 0, 1)]  # batch 1 keeps key 1 only; batch 2: 2 and 4 in, 1 out


def test_a_late_change_is_ignored_and_an_equal_ordering_arriving_later_wins():
    model, _ = replay("order_by", [up(1, 5, name="new"), up(1, 3, name="late"), up(2, 4, name="first"),
                                   up(2, 4, name="second"), up(3, 2, batch=2, name="old"), up(3, 1, batch=2)])
    assert names(model) == {1: "new", 2: "second", 3: "old"}


def test_a_tombstone_deletes_whatever_the_rows_ordering_and_a_later_change_reinserts_even_an_older_one():
    model, counts = replay("order_by", [up(1, 9), up(2, 9), tomb(1, batch=2), tomb(2, batch=2, text=True),
                                        up(2, 1, batch=3, name="older")])
    assert names(model) == {2: "older"}
    assert model.states[1].marker is None and counts == [(2, 0, 0), (0, 0, 2), (1, 0, 0)]


def test_an_ordered_delete_is_remembered_and_keeps_an_older_change_arriving_later_out():
    model, counts = replay("order_by", [up(1, 5), delete(1, 7), up(1, 6, batch=2), up(2, 5), delete(2, 7),
                                        up(2, 7, batch=2, name="equal")])
    assert names(model) == {2: "equal"}  # an upsert at the marker's ordering applies
    assert model.states[1].marker == (7,) and counts == [(0, 0, 0), (1, 0, 0)]


def test_a_delete_older_than_the_row_deletes_nothing_but_its_marker_outlives_a_tombstone():
    model, counts = replay("order_by", [up(1, 9, name="kept"), delete(1, 5), delete(1, 3), up(2, 9), delete(2, 5),
                                        tomb(2, batch=2), up(2, 4, batch=2), up(3, 2, batch=2), delete(3, 8, batch=2),
                                        tomb(3, batch=2), up(3, 7, batch=3)])
    assert names(model) == {1: "kept"}
    assert [model.states[k].marker for k in (1, 2, 3)] == [(5,), (5,), (8,)]  # the highest, never lowered
    assert counts == [(2, 0, 0), (0, 0, 1), (0, 0, 0)]


def test_a_delete_of_a_key_never_seen_leaves_a_marker():
    model, _ = replay("order_by", [delete(1, 4), up(1, 3), up(1, 4, name="at")])
    assert names(model) == {1: "at"} and model.states[1].marker == (4,)


def test_debezium_orders_by_lsn_then_ts_ms_and_its_own_tombstone_changes_nothing():
    noop = Change(1, 1, NOOP)
    model, _ = replay("debezium", [dbz(1, "c", 10), dbz(1, "u", 20, 5, name="b"), dbz(1, "u", 20, 4, name="older"),
                                   dbz(2, "r", 10), dbz(2, "d", 30), Change(2, 1, NOOP),
                                   dbz(2, "u", 20, batch=2), noop])
    assert names(model) == {1: "b"}
    assert model.table()[1] | {"kafka_offset": None} == {
        "id": 1, "name": "b", "qty": None, "kafka_topic": "t", "kafka_partition": 0, "kafka_offset": None,
        "ingest_batch_id": 1, "cdc_op": "u", "cdc_position": 20, "cdc_ts_ms": TS_BASE + 5}


def test_a_redelivered_debezium_event_applies_again_only_while_nothing_newer_came():
    current, older = dbz(1, "u", 20), dbz(2, "u", 20)
    model, counts = replay("debezium", [current, older, dbz(2, "u", 30, name="newer"),
                                        Change(1, 2, UPSERT, current.order, current.name, None, "u", redelivered=True),
                                        Change(2, 2, UPSERT, older.order, older.name, None, "u", redelivered=True)])
    assert names(model) == {1: "1@20", 2: "newer"}
    assert model.table()[1]["ingest_batch_id"] == 2  # the redelivery wrote the row again
    assert counts == [(2, 0, 0), (0, 1, 0)]  # the same change applied again is an update


def test_the_ledger_counts_keys_in_out_and_kept_with_an_upsert_applied():
    first = [up(1, 1), up(2, 1), up(3, 1), up(4, 1)]
    model, counts = replay("order_by", [*first, up(1, 0, batch=2), delete(2, 2, batch=2), up(2, 3, batch=2),
                                        up(3, 1, batch=2), up(5, 1, batch=2), delete(5, 1, batch=2),
                                        delete(4, 2, batch=2)])
    # 1: a late upsert, kept unchanged; 2: deleted and re-inserted (an update); 3: the same ordering again (an
    # update); 5: in and out within the batch (nothing); 4: deleted
    assert counts == [(4, 0, 0), (0, 2, 1)]
    assert model.last_changes == {"inserted": [], "updated": [2, 3], "deleted": [4]}


def test_rows_hold_the_payload_and_where_the_change_that_wrote_them_was():
    model, _ = replay("order_by", [up(5, 3), up(8, 2), up(5, 4, batch=2, name="five"), up(5, 1, batch=2)], 3)
    assert model.table() == {
        5: {"id": 5, "name": "five", "qty": 4, "op": None, "updated_at": dt.datetime(2024, 5, 1, 10, 0, 4,
                                                                                       tzinfo=dt.UTC),
            "kafka_topic": "t", "kafka_partition": 2, "kafka_offset": 2, "ingest_batch_id": 2},
        8: {"id": 8, "name": "8@2", "qty": 2, "op": None, "updated_at": dt.datetime(2024, 5, 1, 10, 0, 2,
                                                                                      tzinfo=dt.UTC),
            "kafka_topic": "t", "kafka_partition": 2, "kafka_offset": 1, "ingest_batch_id": 1}}
    assert set(model.table()[5]) == set(columns("order_by"))


# --- Kafka ----------------------------------------------------------------------------------------------------------


def test_records_land_on_the_keys_partition_in_order_with_offsets_counted_per_partition():
    case = Case("position", 3, (up(1, name="a"), up(4, name="b"), up(2, name="c"), up(1, name="d"), up(4, name="e"),
                                up(1, batch=2, name="f"), up(3, batch=2, name="g")))
    placed = [[(r.partition, r.offset, r.change.name) for r in batch] for batch in schedule(case)]
    assert placed == [[(1, 0, "a"), (1, 1, "b"), (1, 2, "d"), (1, 3, "e"), (2, 0, "c")],  # round-robin: 1, 4, 1, 4
                      [(0, 0, "g"), (1, 4, "f")]]


def test_what_a_record_holds():
    assert encode("order_by", tomb(1, text=True)) == (b"1", None)
    assert encode("order_by", tomb(1)) == (b'{"id": 1}', None)
    key, value = encode("order_by", delete(2, 5))
    assert json.loads(value) == {"id": 2, "name": None, "qty": None, "op": "delete",
                                 "updated_at": "2024-05-01T10:00:05Z"}
    assert json.loads(encode("position", up(3, name="n"))[1]) == {"id": 3, "name": "n", "qty": None, "op": None}
    event = json.loads(encode("debezium", dbz(4, "d", 7, 1, name="gone"))[1])
    assert event == {"op": "d", "before": {"id": 4, "name": "gone", "qty": None}, "after": None,
                     "source": {"lsn": 7, "ts_ms": TS_BASE + 1}, "ts_ms": TS_BASE + 1000}
    wrapped = Change(4, 1, UPSERT, (7, TS_BASE), "w", 1, "c", wrapped=True)
    assert json.loads(encode("debezium", wrapped)[1])["payload"]["after"] == {"id": 4, "name": "w", "qty": 1}
    assert encode("debezium", Change(4, 1, NOOP)) == (b'{"id": 4}', None)


@pytest.mark.parametrize("mode", MODES)
def test_each_modes_pipeline_parses(mode):
    config = parse_pipeline(pipeline_dict(mode, "gen"), "test")
    assert config.keyed is not None and config.name == "gen"


# --- the generated cases ------------------------------------------------------------------------------------------


@FAST
@given(st.sampled_from(MODES).flatmap(lambda m: cases(m, 3, max_keys=8)))
def test_generated_cases_keep_each_keys_changes_in_batches_that_run(case):
    batches = [c.batch for c in case.changes]
    assert sorted(set(batches)) == list(range(1, case.batches + 1))  # no batch without a change
    for key in case.keys:
        stream = case.stream(key)
        assert [c.batch for c in stream] == sorted(c.batch for c in stream)
        for i, c in enumerate(stream):
            if case.mode == "position" or c.kind in (TOMBSTONE, NOOP):
                assert c.order is None
            else:
                assert len(c.order) == (2 if case.mode == "debezium" else 1)
            if c.kind == NOOP:
                assert case.mode == "debezium" and stream[i - 1].op == "d"
            if c.redelivered:
                assert any(e.order == c.order and e.name == c.name and e.op == c.op for e in stream[:i])
    assert all(f"key {k} " in repr(case) for k in case.keys)
    assert pretty(case) == repr(case)  # what Hypothesis prints of a falsifying case


@FAST
@given(st.sampled_from(("position", "order_by", "debezium")).flatmap(lambda m: cases(m, 3, max_keys=8)))
def test_the_model_agrees_with_a_stateless_statement_where_one_exists(case):
    """By position the table holds each key's last change if an upsert. With an ordering and no tombstone, the
    newest change by (ordering, offset) decides: the rules (marker included) come to the same."""
    model, _ = replay(case.mode, list(case.changes), case.partitions)
    if case.mode != "position" and any(c.kind == TOMBSTONE for c in case.changes):
        return
    for key in case.keys:
        changes = [(c, i) for i, c in enumerate(case.stream(key)) if c.kind != NOOP]
        last = changes[-1][0] if case.mode == "position" else max(changes, key=lambda ci: (ci[0].order, ci[1]))[0]
        expected = last.name if last.kind == UPSERT else None
        assert names(model).get(key) == expected, (key, case.stream(key))
