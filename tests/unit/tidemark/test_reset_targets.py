from __future__ import annotations

import datetime as dt

import pytest

from tidemark.errors import ResetError
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.kafka.reset_targets import parse_datetime, parse_duration, parse_offsets_file, parse_scope, preview_reset

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)
ALL = [A0, A1, B0]
EARLIEST = {A0: 10, A1: 0, B0: 5}
LATEST = {A0: 100, A1: 50, B0: 5}
CURRENT = {A0: 40, A1: 50}


def reset(scenario, scope=ALL, **kw):
    return preview_reset("p", scenario, scope, CURRENT, EARLIEST, LATEST, **kw)


def test_to_earliest_and_to_latest_with_the_dry_run_table():
    assert reset("to-earliest").as_table() == [
        {"topic": "a", "partition": 0, "current": 40, "new": 10, "change": -30},
        {"topic": "a", "partition": 1, "current": 50, "new": 0, "change": -50},
        {"topic": "b", "partition": 0, "current": None, "new": 5, "change": None},
    ]
    assert [r.new for r in reset("to-latest").rows] == [100, 50, 5]


def test_to_offset_clamps_with_a_warning():
    plan = reset("to-offset", [A0, A1], offset=60)
    assert [r.new for r in plan.rows] == [60, 50]
    assert plan.warnings == ["a:1: 60 is outside the offsets Kafka has [0, 50]; using 50"]


def test_shift_by_moves_relative_to_the_committed_offset_and_clamps():
    plan = reset("shift-by", [A0, A1], shift=-45)
    assert [(r.new, r.change) for r in plan.rows] == [(10, -30), (5, -45)]
    assert len(plan.warnings) == 1 and plan.warnings[0].startswith("a:0: -5 is outside")


def test_to_datetime_uses_kafkas_offsets_and_latest_when_no_record_is_that_new():
    plan = reset("to-datetime", [A0, A1], time_offsets={A0: 70, A1: None})
    assert [r.new for r in plan.rows] == [70, 50]


def test_from_file_only_touches_the_listed_partitions():
    plan = reset("from-file", ALL, file_offsets={A1: 7})
    assert [(r.tp, r.new) for r in plan.rows] == [(A1, 7)]
    with pytest.raises(ResetError, match="does not read: z:0"):
        reset("from-file", ALL, file_offsets={TP("z", 0): 1})


def test_missing_values_and_unknown_scenarios_are_errors():
    with pytest.raises(ResetError, match="to-offset needs an offset"):
        reset("to-offset")
    with pytest.raises(ResetError, match="unknown reset 'to-nowhere'"):
        reset("to-nowhere")


def test_scope_selects_topics_and_partitions_and_rejects_unknown_ones():
    assert parse_scope(None, ALL, "p") == ALL
    assert parse_scope(["a"], ALL, "p") == [A0, A1]
    assert parse_scope(["a:1", "b"], ALL, "p") == [A1, B0]
    with pytest.raises(ResetError, match="topic 'c' is not one of this pipeline's topics"):
        parse_scope(["c"], ALL, "p")
    with pytest.raises(ResetError, match="topic 'a' has no partition 7"):
        parse_scope(["a:7"], ALL, "p")
    with pytest.raises(ResetError, match="partitions must be numbers"):
        parse_scope(["a:x"], ALL, "p")


def test_datetimes_and_durations():
    assert parse_datetime("2026-11-01T08:00:00Z", "p") == dt.datetime(2026, 11, 1, 8, tzinfo=dt.UTC)
    assert parse_datetime("2026-11-01T08:00:00", "p").tzinfo == dt.UTC
    with pytest.raises(ResetError, match="not an ISO-8601 date-time"):
        parse_datetime("yesterday", "p")
    assert parse_duration("PT15M", "p") == dt.timedelta(minutes=15)
    assert parse_duration("P1DT2H", "p") == dt.timedelta(days=1, hours=2)
    for bad in ("15m", "P", "PT", "-PT1H"):
        with pytest.raises(ResetError, match="not an ISO-8601 duration"):
            parse_duration(bad, "p")


def test_offsets_file_is_kafkas_csv_and_names_the_bad_line():
    assert parse_offsets_file("a,0,12\n\na,1,3\n", "p") == {A0: 12, A1: 3}
    with pytest.raises(ResetError, match="line 2: expected 'topic,partition,offset', got 'a,x,1'"):
        parse_offsets_file("a,0,1\na,x,1\n", "p")
    with pytest.raises(ResetError, match="no 'topic,partition,offset' lines"):
        parse_offsets_file("\n", "p")
