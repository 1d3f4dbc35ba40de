"""Tidemark's metrics through Airflow's own stats (tidemark_airflow.metrics), received by a real UDP
socket as Airflow's StatsD client sends them ([metrics] statsd_on)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tidemark.observe.measurements import Measurement


@pytest.fixture
def statsd(monkeypatch):
    """A UDP listener, and Airflow's metrics configured to send StatsD to it (as a task runner starts)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(10)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.getsockname()[1]))
    from airflow.sdk._shared.observability.metrics import stats

    saved = stats._factory
    stats.initialize(factory=None, export_legacy_names=True)  # as a process that has not set it up
    stats._factory = None

    def received(count: int) -> list[str]:
        """The next ``count`` packets of Tidemark's (Airflow sends its own too)."""
        lines: list[str] = []
        while len(lines) < count:
            packet = listener.recv(65535).decode()
            lines += [line for line in packet.splitlines() if line.startswith("airflow.tidemark.")]
        return lines

    yield received
    stats.initialize(factory=saved, export_legacy_names=True)
    listener.close()


def test_each_kind_is_sent_under_its_name_and_its_legacy_name(statsd, monkeypatch):
    from tidemark_airflow.metrics import emit

    tags = {"pipeline": "orders", "topic": "orders", "partition": "2"}
    emit([Measurement("tidemark.partition_lag", "gauge", 7, tags),
          Measurement("tidemark.batch_records", "count", 1000, {"pipeline": "orders"}),
          Measurement("tidemark.batch_duration", "timing", 1500.0, {"pipeline": "orders"})])
    assert statsd(6) == ["airflow.tidemark.partition_lag:7|g", "airflow.tidemark.partition_lag.orders.orders.2:7|g",
                         "airflow.tidemark.batch_records:1000|c", "airflow.tidemark.batch_records.orders:1000|c",
                         "airflow.tidemark.batch_duration:1500.000000|ms",
                         "airflow.tidemark.batch_duration.orders:1500.000000|ms"]


def test_without_legacy_names_only_the_tagged_names_are_sent(statsd, monkeypatch):
    from tidemark_airflow.metrics import emit

    monkeypatch.setenv("AIRFLOW__METRICS__LEGACY_NAMES_ON", "False")
    emit([Measurement("tidemark.total_lag", "gauge", 3, {"pipeline": "orders"}),
          Measurement("tidemark.freshness_seconds", "gauge", 12.5, {"pipeline": "orders"})])
    assert statsd(2) == ["airflow.tidemark.total_lag:3|g", "airflow.tidemark.freshness_seconds:12.5|g"]


class FakeRun:
    """What observe_run reads of a PipelineRun: its name, config, store, status rows and ledger entries."""

    def __init__(self, tmp_path, rows):
        from tidemark.config.pipeline import parse_pipeline

        self.name, self.store, self.rows = "orders", None, rows
        self.config = parse_pipeline({"name": "orders", "topics": ["orders"], "table": str(tmp_path / "orders"),
                                      "lag": {"hold_warning_after": "1m"}}, "orders.yaml")

    def status(self):
        return self.rows

    def recent_entries(self, count):
        return [{"batch_id": 8, "records": None}, {"batch_id": 7, "records": 40, "dead_letters": 2,
                                                   "duration_seconds": 3.5}]


def test_after_a_batch_the_hold_warning_is_logged_and_the_batch_and_lag_are_sent(statsd, tmp_path, caplog):
    import datetime as dt

    from tidemark_airflow.metrics import observe_run

    since = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat()
    rows = [{"topic": "orders", "partition": 0, "lag": 2, "held_by_open_transactions": 9, "held_since": since}]
    observe_run(FakeRun(tmp_path, rows), batch_id=7)
    assert "pipeline 'orders': orders:0 has 9 offset(s) held back by a transaction open for 5m" in caplog.text
    # a log record at level warning, as docs/OPERATIONS.md says (no "WARNING:" in its text: that is tidemark lag's)
    held = [r for r in caplog.records if "held back by a transaction" in r.getMessage()]
    assert [r.levelname for r in held] == ["WARNING"] and not held[0].getMessage().startswith("WARNING")
    operations = " ".join((Path(__file__).resolve().parents[3] / "docs" / "OPERATIONS.md").read_text().split())
    assert "in the run's log the same words are a log record at level warning" in operations
    sent = statsd(16)  # 8 measurements (no table yet: no freshness), each under two names
    assert [line for line in sent if ".orders" in line and "hold_age" not in line] == [
        "airflow.tidemark.partition_lag.orders.orders.0:2|g",
        "airflow.tidemark.partition_held_by_open_transactions.orders.orders.0:9|g",
        "airflow.tidemark.total_lag.orders:2|g", "airflow.tidemark.held_by_open_transactions.orders:9|g",
        "airflow.tidemark.batch_records.orders:40|c", "airflow.tidemark.batch_dead_letters.orders:2|c",
        "airflow.tidemark.batch_duration.orders:3500.000000|ms"]


def test_a_keyed_batch_also_sends_the_rows_its_merge_inserted_updated_and_deleted(statsd, tmp_path):
    from tidemark_airflow.metrics import observe_run

    class Keyed(FakeRun):
        def recent_entries(self, count):
            return [{"batch_id": 7, "records": 40, "dead_letters": 2, "duration_seconds": None,
                     "rows_inserted": 5, "rows_updated": 3, "rows_deleted": 0}]

    observe_run(Keyed(tmp_path, []), batch_id=7)
    sent = statsd(16)  # lag, holds and hold age of no partition, records, dead letters, three row counts: 8 x 2
    assert [line for line in sent if "batch_rows" in line] == [
        "airflow.tidemark.batch_rows_inserted:5|c", "airflow.tidemark.batch_rows_inserted.orders:5|c",
        "airflow.tidemark.batch_rows_updated:3|c", "airflow.tidemark.batch_rows_updated.orders:3|c",
        "airflow.tidemark.batch_rows_deleted:0|c", "airflow.tidemark.batch_rows_deleted.orders:0|c"]


def test_a_transformed_batch_also_sends_the_records_its_transform_filtered_out(statsd, tmp_path):
    from tidemark_airflow.metrics import observe_run

    class Transformed(FakeRun):
        def recent_entries(self, count):
            return [{"batch_id": 7, "records": 40, "dead_letters": 2, "duration_seconds": None,
                     "filtered": 9}]

    observe_run(Transformed(tmp_path, []), batch_id=7)
    sent = statsd(12)  # lag, holds and hold age of no partition, records, dead letters, filtered: 6 x 2
    assert [line for line in sent if "filtered" in line] == [
        "airflow.tidemark.batch_filtered:9|c", "airflow.tidemark.batch_filtered.orders:9|c"]


def test_a_failure_to_read_is_a_warning_not_a_failed_task(caplog, tmp_path):
    from tidemark_airflow.metrics import observe_run

    class Broken(FakeRun):
        def status(self):
            raise OSError("Kafka is gone")

    observe_run(Broken(tmp_path, []))
    assert "pipeline 'orders': could not send its metrics (OSError: Kafka is gone)" in caplog.text
