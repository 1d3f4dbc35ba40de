"""How the Tidemark page prints times and durations (tidemark_airflow.console_html)."""

from __future__ import annotations

import datetime as dt

import pytest

from tidemark_airflow.console_html import age, since, when

NOW = dt.datetime(2026, 11, 26, 5, 15, 3, tzinfo=dt.UTC)


@pytest.mark.parametrize(("iso", "text"), [
    ("2026-11-26T05:12:03.123456+00:00", "2026-11-26 05:12:03 UTC"),
    ("2026-11-26T06:12:03.9+01:00", "2026-11-26 05:12:03 UTC"),  # another zone, shown in UTC
    ("2026-11-26T05:12:03", "2026-11-26 05:12:03 UTC"),  # naive: the ledger's times are UTC
    (None, "-"),
])
def test_times_are_printed_to_the_second_in_utc(iso, text):
    assert when(iso) == text


def test_since_says_how_long_ago():
    assert since("2026-11-26T05:12:03.5+00:00", NOW) == "3 min ago"
    assert since("2026-11-26T05:15:00+00:00", NOW) == "3 s ago"
    assert since("2026-11-26T05:16:00+00:00", NOW) == "0 s ago"  # a clock ahead of ours is not the future
    assert since(None, NOW) == "-"


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (45, "45 s"), (720, "12 min"), (3 * 3600 + 1800, "3.5 h"),
                                               (2 * 86400, "2.0 d")])
def test_age(seconds, text):
    assert age(seconds) == text
