"""Tidemark's metrics through Airflow's own (``airflow.sdk.observability.stats``): StatsD, DogStatsD or
OpenTelemetry, as ``[metrics]`` configures Airflow (``statsd_on``, ``otel_on``...); nothing is sent when
metrics are off. The values come from the core (``tidemark.observe.measurements``); this module only sends
them, and logs the open-transaction hold warnings, after every run (``observe_run``). Best effort: the
batch is committed by then, so a failure here is a warning, never a failed task."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from tidemark.observe.freshness import freshness_seconds
from tidemark.observe.measurements import Measurement, batch_measurements, hold_warnings, pipeline_measurements
from tidemark.run import PipelineRun

log = logging.getLogger("tidemark")


def _stats():
    """Airflow's stats module, initialised from ``[metrics]`` if this process has not done it yet (the task
    runner does; ``airflow dags test`` and ``dag.test()`` run tasks without it)."""
    from airflow.sdk._shared.observability.metrics import stats

    if getattr(stats, "_factory", None) is None:
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils

        stats.initialize(factory=stats_utils.get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True))
    return stats


def emit(measurements: Iterable[Measurement]) -> None:
    """Send each measurement under its name with its tags, and, as Airflow does for its own metrics when
    ``[metrics] legacy_names_on`` is true (the default), under its legacy name (the tags' values in the
    name), which plain StatsD keeps apart."""
    from airflow.sdk.configuration import conf

    stats = _stats()
    legacy = conf.getboolean("metrics", "legacy_names_on", fallback=True)
    for m in measurements:
        for name, tags in ((m.name, dict(m.tags)), *(((m.legacy_name, None),) if legacy else ())):
            if m.kind == "gauge":
                stats.gauge(name, m.value, tags=tags)
            elif m.kind == "count":
                stats.incr(name, int(m.value), tags=tags)
            else:
                stats.timing(name, dt.timedelta(milliseconds=m.value), tags=tags)


def observe_run(run: PipelineRun, rows: list[dict] | None = None, batch_id: int | None = None) -> None:
    """After a run: warn about long open-transaction holds and send the pipeline's metrics (lag, holds,
    freshness) and, for a committed batch, the batch's (records, dead letters, duration, a keyed batch's rows
    inserted, updated and deleted, and a transformed batch's records filtered out). ``rows``: the
    ``partition_status`` rows the report just read (read again when not given)."""
    now = dt.datetime.now(dt.UTC)
    try:
        rows = run.status() if rows is None else rows
        for warning in hold_warnings(run.name, rows, run.config.lag.hold_warning_after, now):
            log.warning(warning)
        measurements = pipeline_measurements(run.name, rows, freshness_seconds(run.config.table_uri, run.store),
                                             now)
        if batch_id is not None:
            entry = next((e for e in run.recent_entries(5) if e["batch_id"] == batch_id), None)
            if entry is not None and entry["records"] is not None:
                changed = entry.get("rows_inserted") is not None
                measurements += batch_measurements(
                    run.name, entry["records"], entry["dead_letters"], entry["duration_seconds"],
                    (entry["rows_inserted"], entry["rows_updated"], entry["rows_deleted"]) if changed else None,
                    entry.get("filtered"))
        emit(measurements)
    except Exception as exc:  # the run's work is done; metrics must not fail it
        log.warning("pipeline '%s': could not send its metrics (%s: %s); the data and the ledger are not "
                    "affected", run.name, type(exc).__name__, exc)
