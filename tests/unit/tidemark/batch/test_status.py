"""A pipeline's status (tidemark.batch.status): its health in one word."""

from __future__ import annotations

import datetime as dt

import pytest

from tidemark.batch.status import FAILING, GAP_RECORDED, HEALTHY, LAGGING, health
from tidemark.ledger import COMMITTED, PLANNED

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
])
def test_health_in_one_word(activity, lag, failed, expected):
    assert health(activity, lag, NOW, failed) == expected
