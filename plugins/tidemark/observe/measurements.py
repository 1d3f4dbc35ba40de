"""What operators watch, computed in the core (no Airflow; the pipeline's settings for it, ``lag:`` and
``freshness_alert:``, are ``tidemark.config.alerting``): how long open transactions have held records back, how fresh
the output is, and the metrics (``Measurement``) that the Airflow adapter (``tidemark_airflow.metrics``)
hands to Airflow's own metrics (StatsD, OpenTelemetry). ``METRICS`` lists every metric: docs/OPERATIONS.md
shows the same table, and a test keeps them equal."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidemark.kafka.offsets import TopicPartition


@dataclass(frozen=True)
class Measurement:
    """One value for Airflow's metrics: ``name`` with ``tags`` (OpenTelemetry, Datadog, InfluxDB-style
    StatsD), and ``legacy_name``, the name with the tags' values in it, for plain StatsD (which drops tags)."""

    name: str
    kind: str  # gauge | count | timing (milliseconds)
    value: float
    tags: Mapping[str, str]

    @property
    def legacy_name(self) -> str:
        """As Airflow names its own legacy metrics: the tags' values appended, dots in them as ``__``."""
        return ".".join([self.name, *(str(v).replace(".", "__") for v in self.tags.values())])


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str
    tags: tuple[str, ...]
    description: str


PIPELINE, PARTITION = ("pipeline",), ("pipeline", "topic", "partition")
METRICS = (
    MetricSpec("tidemark.partition_lag", "gauge", PARTITION,
               "offsets Kafka holds that the pipeline has not committed (to the last stable offset)"),
    MetricSpec("tidemark.total_lag", "gauge", PIPELINE, "the sum of partition_lag"),
    MetricSpec("tidemark.partition_held_by_open_transactions", "gauge", PARTITION,
               "high watermark minus last stable offset: records open transactions hold back"),
    MetricSpec("tidemark.held_by_open_transactions", "gauge", PIPELINE,
               "the sum of partition_held_by_open_transactions"),
    MetricSpec("tidemark.hold_age_seconds", "gauge", PIPELINE,
               "how long the oldest open transaction has held records back (0: none)"),
    MetricSpec("tidemark.freshness_seconds", "gauge", PIPELINE,
               "age of the newest record in the output table (its Kafka timestamp); not sent before one"),
    MetricSpec("tidemark.batch_records", "count", PIPELINE, "records a committed batch wrote to the output"),
    MetricSpec("tidemark.batch_dead_letters", "count", PIPELINE, "records a committed batch wrote as dead letters"),
    MetricSpec("tidemark.batch_duration", "timing", PIPELINE,
               "a committed batch's time from freezing its ranges to its ledger commit (milliseconds)"),
    MetricSpec("tidemark.batch_rows_inserted", "count", PIPELINE,
               "rows a committed keyed batch's MERGE inserted into the table (keyed pipelines only)"),
    MetricSpec("tidemark.batch_rows_updated", "count", PIPELINE,
               "rows a committed keyed batch's MERGE updated (keyed pipelines only)"),
    MetricSpec("tidemark.batch_rows_deleted", "count", PIPELINE,
               "rows a committed keyed batch's MERGE deleted (keyed pipelines only)"),
    MetricSpec("tidemark.batch_filtered", "count", PIPELINE,
               "records a committed batch's SQL transform filtered out (pipelines with a transform only)"),
)


def hold_ages(rows: Iterable[Mapping], now: dt.datetime) -> dict[TopicPartition, float]:
    """Per held partition of ``partition_status`` rows, seconds since its hold began (``held_since``)."""
    ages = {}
    for row in rows:
        since = row.get("held_since")
        if row.get("held_by_open_transactions") and since:
            ages[TopicPartition(row["topic"], row["partition"])] = max(
                (now - dt.datetime.fromisoformat(since)).total_seconds(), 0.0)
    return ages


def hold_warnings(pipeline: str, rows: Iterable[Mapping], after: dt.timedelta, now: dt.datetime) -> list[str]:
    """One warning per partition whose open-transaction hold has lasted longer than ``after``."""
    rows = list(rows)
    held = {TopicPartition(r["topic"], r["partition"]): r["held_by_open_transactions"] for r in rows}
    return [f"pipeline '{pipeline}': {tp} has {held[tp]} offset(s) held back by a transaction open for "
            f"{_human(age)} (over hold_warning_after, {_human(after.total_seconds())}): its producer has neither "
            f"committed nor aborted it, and no read_committed reader sees those records or any after them. "
            f"Find the producer (kafka-transactions.sh list / describe-producers), or abort the transaction "
            f"(kafka-transactions.sh abort)"
            for tp, age in sorted(hold_ages(rows, now).items()) if age > after.total_seconds()]


def _human(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def pipeline_measurements(pipeline: str, rows: Iterable[Mapping], freshness_seconds: float | None,
                          now: dt.datetime) -> list[Measurement]:
    """Lag, holds and freshness of a pipeline from its ``partition_status`` rows; partitions whose
    latest offset is unknown send nothing."""
    rows = [r for r in rows if r.get("lag") is not None]
    tags = {"pipeline": pipeline}
    out = []
    for row in rows:
        part = {**tags, "topic": row["topic"], "partition": str(row["partition"])}
        out.append(Measurement("tidemark.partition_lag", "gauge", row["lag"], part))
        out.append(Measurement("tidemark.partition_held_by_open_transactions", "gauge",
                               row.get("held_by_open_transactions") or 0, part))
    ages = hold_ages(rows, now)
    out += [Measurement("tidemark.total_lag", "gauge", sum(r["lag"] for r in rows), tags),
            Measurement("tidemark.held_by_open_transactions", "gauge",
                        sum(r.get("held_by_open_transactions") or 0 for r in rows), tags),
            Measurement("tidemark.hold_age_seconds", "gauge", round(max(ages.values(), default=0.0), 3), tags)]
    if freshness_seconds is not None:
        out.append(Measurement("tidemark.freshness_seconds", "gauge", round(freshness_seconds, 3), tags))
    return out


def batch_measurements(pipeline: str, records: int, dead_letters: int, duration_seconds: float | None,
                       rows_changed: tuple[int, int, int] | None = None,
                       filtered: int | None = None) -> list[Measurement]:
    """What one committed batch wrote, and how long it took from freezing to commit; for a keyed batch also
    ``rows_changed``, the rows its MERGE inserted, updated and deleted (``tidemark.ledger.state.RowChanges``); for a
    transformed one the records its transform ``filtered`` out (over its partitions)."""
    tags = {"pipeline": pipeline}
    out = [Measurement("tidemark.batch_records", "count", records, tags),
           Measurement("tidemark.batch_dead_letters", "count", dead_letters, tags)]
    if duration_seconds is not None:
        out.append(Measurement("tidemark.batch_duration", "timing", round(duration_seconds * 1000, 3), tags))
    if rows_changed is not None:
        out += [Measurement(f"tidemark.batch_rows_{what}", "count", n, tags)
                for what, n in zip(("inserted", "updated", "deleted"), rows_changed, strict=True)]
    if filtered is not None:
        out.append(Measurement("tidemark.batch_filtered", "count", filtered, tags))
    return out
