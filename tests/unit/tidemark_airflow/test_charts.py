"""The Tidemark page's charts (tidemark_airflow.charts): what each chart takes from the ledger entries and
how it lays them out. The charts drawn in the browser are read in tests/e2e/test_local_airflow.py."""

from __future__ import annotations

import pytest

from tidemark_airflow.charts import HEIGHT, charts, duration_chart, lag_chart, nice_ceiling, records_chart


def entry(batch_id, kind="batch", status="committed", offsets=10, records=9, duration=2.5):
    return {"batch_id": batch_id, "kind": kind, "status": status, "offsets": offsets, "records": records,
            "dead_letters": 0, "duration_seconds": duration, "committed_at": "2026-11-26T05:12:03.123456+00:00"}


# Newest first, as PipelineRun.recent_entries gives them.
ENTRIES = [entry(6, status="planned", offsets=99), entry(5, offsets=500, records=480),
           entry(4, "backfill", offsets=30, records=30, duration=None), entry(3, "reset", offsets=0, records=None),
           entry(2, "gap", offsets=2, records=None), entry(1, offsets=120, records=100, duration=40)]


def test_the_lag_chart_has_the_committed_batches_oldest_first_and_no_backfill():
    chart = lag_chart(ENTRIES, cap=None)
    assert [(m.batch_id, m.kind, m.value, m.text) for m in chart.marks] == [(1, "batch", 120, "120"),
                                                                         (5, "batch", 500, "500")]
    assert "Backfills are not lag" in chart.note and "max_offsets_per_run" not in chart.note


def test_a_batch_as_large_as_the_cap_says_the_lag_was_at_least_that():
    chart = lag_chart(ENTRIES, cap=500)
    assert [m.text for m in chart.marks] == ["120", ">= 500"]
    assert "max_offsets_per_run (500)" in chart.note


def test_the_records_and_duration_charts_have_batches_and_backfills_apart():
    records = records_chart(ENTRIES)
    assert [(m.batch_id, m.kind, m.value) for m in records.marks] == [(1, "batch", 100), (4, "backfill", 30),
                                                                      (5, "batch", 480)]
    duration = duration_chart(ENTRIES)  # the backfill's duration is unknown: left out
    assert [(m.batch_id, m.text) for m in duration.marks] == [(1, "40 s"), (5, "2.5 s")]


def test_marks_are_scaled_to_a_round_axis_left_to_right():
    chart = records_chart(ENTRIES)
    assert [label for _, label in chart.ticks] == ["0", "250", "500"]
    [first, backfill, last] = chart.marks
    assert first.x < backfill.x < last.x
    assert 0 < last.y < first.y < backfill.y < chart.bottom < HEIGHT  # larger values reach higher
    assert chart.path.count(",") == 3 and chart.empty == ""
    assert [m.batch_id for m in chart.x_labels] == [1, 4, 5]


def test_a_pipeline_without_committed_batches_says_so():
    lag, records, duration = charts([entry(1, "backfill"), entry(2, status="planned")], cap=None)
    assert lag.marks == [] and "No committed batch yet" in lag.empty
    assert [m.batch_id for m in records.marks] == [1] and records.empty == ""
    assert charts([], cap=None)[1].empty


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (7, 8), (120, 200), (480, 500), (2100, 2500),
                                            (2600, 3000), (0.4, 0.4), (0.45, 0.5)])
def test_nice_ceiling(value, top):
    assert nice_ceiling(value) == top


def test_a_transformed_pipelines_records_say_how_many_the_transform_filtered_out():
    shown = [{**entry(2), "filtered": 1200}, {**entry(1), "filtered": None}]
    records = records_chart(shown)
    assert [(m.batch_id, m.detail) for m in records.marks] == [(1, ""), (2, "1,200 filtered by the transform")]
    assert "filtered out in each tooltip" in records.note
    assert "filtered" not in records_chart(ENTRIES).note and {m.detail for m in records_chart(ENTRIES).marks} == {""}


def test_a_keyed_pipeline_gets_a_chart_of_the_rows_each_merge_changed():
    keyed = [{**entry(3), "rows_inserted": 0, "rows_updated": 0, "rows_deleted": 0},  # a replay: nothing changed
             {**entry(2, status="planned"), "rows_inserted": None, "rows_updated": None, "rows_deleted": None},
             {**entry(1), "rows_inserted": 1200, "rows_updated": 30, "rows_deleted": 4}]
    *_, changes = charts(keyed, cap=None)
    assert changes.id == "chart-changes" and changes.unit == "rows"
    assert [(m.batch_id, m.value, m.text, m.detail) for m in changes.marks] == [
        (1, 1234, "1,234", "1,200 inserted, 30 updated, 4 deleted"), (3, 0, "0", "0 inserted, 0 updated, 0 deleted")]
    assert [c.id for c in charts(ENTRIES, cap=None)] == ["chart-lag", "chart-records", "chart-duration"]  # appends
