"""A pipeline's status (tidemark.batch.status): its health in one word, and its per-partition rows."""

from __future__ import annotations

import datetime as dt

import pytest

from tidemark.batch.status import FAILING, GAP_RECORDED, HEALTHY, LAGGING, _status_rows, health
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger.state import LedgerState
from tidemark.ledger.store import COMMITTED, PLANNED

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(("activity", "lag", "failed", "expected"), [
    ({}, 0, False, HEALTHY),
    ({("batch", COMMITTED): {"committed_at": NOW}}, 5, False, LAGGING),
    ({("batch", COMMITTED): {"committed_at": NOW}}, None, False, HEALTHY),
    ({("batch", COMMITTED): {"committed_at": NOW}}, 0, True, FAILING),
    ({("batch", PLANNED): {"planned_at": NOW - dt.timedelta(hours=2)}}, 0, False, FAILING),
    ({("batch", PLANNED): {"planned_at": NOW - dt.timedelta(minutes=5)}}, 3, False, LAGGING),
    ({("gap", COMMITTED): {"committed_at": NOW - dt.timedelta(hours=3)}}, 3, False, GAP_RECORDED),
    ({("gap", COMMITTED): {"committed_at": NOW - dt.timedelta(days=2)}}, 0, False, HEALTHY),
    # a reprocess entry of dead letters left unfinished holds no batch back: not a stuck batch (issue 42)
    ({("reprocess", PLANNED): {"planned_at": NOW - dt.timedelta(hours=2)}}, 0, False, HEALTHY),
])
def test_health_in_one_word(activity, lag, failed, expected):
    assert health(activity, lag, NOW, failed) == expected


P0, P1, P2 = (TopicPartition("orders", p) for p in range(3))


def test_offsets_held_by_open_transactions_are_the_high_watermark_minus_the_last_stable_offset():
    state = LedgerState(positions={P0: 10, P1: 4}, last_batch={P0: 3, P1: 3})
    rows = _status_rows(state, [P0, P1, P2], earliest={P0: 0, P1: 0, P2: 5}, latest={P0: 10, P1: 7, P2: 5},
                        watermarks={P0: 164, P1: 7, P2: 9})
    assert [(r["partition"], r["committed_offset"], r["latest_offset"], r["lag"], r["held_by_open_transactions"])
            for r in rows] == [(0, 10, 10, 0, 154), (1, 4, 7, 3, 0), (2, None, 5, 0, 4)]
    assert list(rows[0]) == ["topic", "partition", "committed_offset", "latest_offset", "lag", "last_batch_id",
                             "held_by_open_transactions", "held_since"]  # the contract's keys first, new ones added
    assert [r["held_since"] for r in rows] == [None, None, None]  # undated: no held_since given


def test_nothing_counts_as_held_when_kafka_is_unknown():
    state = LedgerState(positions={P0: 10}, last_batch={P0: 3})
    assert [(r["lag"], r["held_by_open_transactions"]) for r in _status_rows(state, (), {}, {})] == [(None, None)]
    rows = _status_rows(state, [P0], {P0: 0}, {P0: 12}, watermarks={})
    assert (rows[0]["lag"], rows[0]["held_by_open_transactions"]) == (2, None)
