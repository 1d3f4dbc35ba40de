from __future__ import annotations

import datetime as dt

import pytest

from tidemark.errors import ConfigError
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark_airflow.run_modes import decide_run

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(hours=1)


def test_default_is_incremental_and_native_backfills_use_the_data_interval():
    assert decide_run("p", {}, "manual", None).mode == "incremental"
    assert decide_run("p", {"mode": "incremental"}, "scheduled", (T0, T1)).backfill is None
    backfill = decide_run("p", {"mode": "capped"}, "backfill", (T0, T1))
    assert backfill.mode == "backfill_window" and backfill.backfill.window == (T0, T1)


def test_capped_run_needs_a_positive_cap():
    assert decide_run("p", {"mode": "capped", "max_records": 500}, "manual", None).max_records == 500
    for bad in (None, 0, -3, True, "10"):
        with pytest.raises(ConfigError, match="form field 'max_records' must be a whole number >= 1"):
            decide_run("p", {"mode": "capped", "max_records": bad}, "manual", None)


def test_window_backfill_parses_iso_times_as_utc_and_checks_the_order():
    request = decide_run("p", {"mode": "backfill_window", "window_start": "2026-11-01T00:00:00",
                               "window_end": "2026-11-01T01:00:00Z", "on_empty_window": "fail"}, "manual", None)
    assert request.backfill.window == (T0, T1) and request.backfill.on_empty_window == "fail"
    with pytest.raises(ConfigError, match="'window_end' must be after 'window_start'"):
        decide_run("p", {"mode": "backfill_window", "window_start": T1.isoformat(), "window_end": T0.isoformat()},
                   "manual", None)
    with pytest.raises(ConfigError, match="form field 'window_start' is required"):
        decide_run("p", {"mode": "backfill_window", "window_end": T1.isoformat()}, "manual", None)
    with pytest.raises(ConfigError, match="form field 'window_end': 'noon' is not an ISO-8601 date-time"):
        decide_run("p", {"mode": "backfill_window", "window_start": T0.isoformat(), "window_end": "noon"},
                   "manual", None)


def test_offsets_backfill_reads_the_list_and_names_bad_items():
    request = decide_run("p", {"mode": "backfill_offsets", "offsets": [
        {"topic": "o", "partition": 1, "start": 5, "end": 9}]}, "manual", None)
    assert request.backfill.offsets == {TP("o", 1): (5, 9)}
    with pytest.raises(ConfigError, match="needs at least one"):
        decide_run("p", {"mode": "backfill_offsets", "offsets": []}, "manual", None)
    with pytest.raises(ConfigError, match="item 0: expected"):
        decide_run("p", {"mode": "backfill_offsets", "offsets": [{"topic": "o"}]}, "manual", None)
    twice = [{"topic": "o", "partition": 0, "start": 0, "end": 1}] * 2
    with pytest.raises(ConfigError, match="names o:0 twice"):
        decide_run("p", {"mode": "backfill_offsets", "offsets": twice}, "manual", None)


def test_unknown_mode_and_empty_native_interval_are_errors():
    with pytest.raises(ConfigError, match="form field 'mode': 'turbo' is not one of"):
        decide_run("p", {"mode": "turbo"}, "manual", None)
    with pytest.raises(ConfigError, match="empty data interval"):
        decide_run("p", {}, "backfill", (T0, T0))


@pytest.mark.parametrize(("params", "message"), [
    ({"mode": "incremental", "window_start": "2026-11-01T00:00:00Z"},
     "form field 'window_start' is only used with mode 'backfill_window', not 'incremental'"),
    ({"max_records": 100}, "form field 'max_records' is only used with mode 'capped', not 'incremental'"),
    ({"mode": "capped", "max_records": 5, "offsets": [{"topic": "t", "partition": 0, "start": 0, "end": 1}]},
     "form field 'offsets' is only used with mode 'backfill_offsets', not 'capped'"),
    ({"mode": "backfill_offsets", "on_empty_window": "fail", "offsets": [{"topic": "t", "partition": 0, "start": 0,
                                                                         "end": 1}]},
     "form field 'on_empty_window' is only used with mode 'backfill_window'"),
])
def test_a_form_field_of_another_mode_is_refused_not_ignored(params, message):
    """A window filled in under the default mode 'incremental' used to run an ordinary incremental batch."""
    with pytest.raises(ConfigError, match=f"pipeline 'p': {message}.*choose .* or clear the field"):
        decide_run("p", params, "manual", None)
    defaults = {"mode": "backfill_offsets", "on_empty_window": "skip", "max_records": None, "window_start": None,
                "offsets": [{"topic": "t", "partition": 0, "start": 0, "end": 1}]}
    assert decide_run("p", defaults, "manual", None).mode == "backfill_offsets"  # defaults left alone are fine


def test_a_replay_form_field_of_another_scenario_is_refused_before_anything_is_read(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from tidemark_airflow import tasks

    monkeypatch.setattr(tasks, "open_run", lambda pipeline: pytest.fail("the pipeline was opened"))
    with pytest.raises(AirflowFailException, match="form field 'offset' is only used with scenario 'to-offset', not "
                                                   "'to-earliest'"):
        tasks.reset("orders", params={"scenario": "to-earliest", "offset": 500, "dry_run": False, "reason": "x"})
