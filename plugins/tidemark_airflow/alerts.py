"""Freshness alerts through Airflow 3's Deadline Alerts: a pipeline with ``freshness_sla`` gets a
``DeadlineAlert`` on its ingest DAG. Its reference (``NewestRecordReference``, registered by the Tidemark
plugin) is the newest record in the output table (``tidemark.observe.freshness``), evaluated as each run is
created, so each run's deadline is *newest record + freshness_sla* (*creation + freshness_sla* before
the output has a record). Airflow drops the
deadline of a run that succeeds before it; otherwise the scheduler marks it missed and an executor runs
``freshness_missed``, which checks the output again (a later run may have brought fresh records) and
calls the pipeline's ``freshness_alert.callback`` (a function or an Airflow notifier: Slack, SMTP...).

Imported by the plugin in every Airflow process: Airflow's deadline classes only, nothing else at import."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk.definitions.deadline import REFERENCE_TYPE_FIELD, BaseDeadlineReference

log = logging.getLogger("tidemark")

MISSED_CALLBACK = "tidemark_airflow.alerts.freshness_missed"


class NewestRecordReference(BaseDeadlineReference):
    """A deadline reference: the Kafka timestamp of the newest record in the pipeline's output table;
    before the output holds a record, the run's creation (a new pipeline must bring its first records
    within the SLA too)."""

    def __init__(self, pipeline: str = "") -> None:
        self.pipeline = pipeline

    def serialize_reference(self) -> dict[str, Any]:
        return {REFERENCE_TYPE_FIELD: self.reference_name, "pipeline": self.pipeline}

    @classmethod
    def deserialize_reference(cls, reference_data: dict[str, Any]) -> NewestRecordReference:
        return cls(reference_data.get("pipeline", ""))

    def _evaluate_with(self, *, session=None, **kwargs) -> dt.datetime | None:
        """Runs where the run is created (the scheduler, or the api-server for a triggered run). A failure
        must not stop either: the deadline then counts from now (the run must succeed within the SLA), and
        the log says why."""
        try:
            from tidemark.observe.freshness import newest_record_time
            from tidemark_airflow.resolver import open_run

            run = open_run(self.pipeline)
            newest = newest_record_time(run.config.table_uri, run.store)
            return newest if newest is not None else dt.datetime.now(dt.UTC)
        except Exception as exc:
            log.warning("pipeline '%s': could not read its output's newest record for the freshness deadline "
                        "(%s: %s); this run's deadline counts from now", self.pipeline, type(exc).__name__, exc)
            return dt.datetime.now(dt.UTC)


def freshness_deadline(config):
    """The ingest DAG's DeadlineAlert for a pipeline with ``freshness_sla`` (None without)."""
    if config.freshness_sla is None:
        return None
    from airflow.sdk import DeadlineAlert, SyncCallback

    kwargs = {"pipeline": config.name, "sla_seconds": config.freshness_sla.total_seconds(),
              "notify": config.freshness_alert.callback, "notify_kwargs": dict(config.freshness_alert.kwargs)}
    return DeadlineAlert(reference=NewestRecordReference(config.name), interval=config.freshness_sla,
                         callback=SyncCallback(MISSED_CALLBACK, kwargs=kwargs), name=f"freshness of {config.name}")


def freshness_missed(context: dict, pipeline: str, sla_seconds: float, notify: str,
                     notify_kwargs: dict | None = None):
    """The deadline's callback (run by an executor). Alerts unless the output is fresh again: calls
    ``notify`` (a function: with ``context`` and ``notify_kwargs``; a notifier class: built with
    ``notify_kwargs``, called with the context). The context gains ``tidemark``: pipeline, message,
    freshness_seconds (None: unknown), sla_seconds, newest_record_at."""
    from airflow.sdk._shared.module_loading import import_string

    from tidemark.observe.freshness import newest_record_time
    from tidemark_airflow.resolver import open_run

    try:
        run = open_run(pipeline)
        newest = newest_record_time(run.config.table_uri, run.store)
    except Exception as exc:  # alert anyway: not knowing is no reason to stay silent
        log.warning("pipeline '%s': could not read its output's newest record (%s)", pipeline, exc)
        newest = None
    age = None if newest is None else (dt.datetime.now(dt.UTC) - newest).total_seconds()
    if age is not None and age <= sla_seconds:
        log.info("pipeline '%s': a freshness deadline passed, but its newest record is %.0f s old again (SLA %.0f "
                 "s): no alert", pipeline, age, sla_seconds)
        return None
    message = (f"Tidemark pipeline '{pipeline}' is stale: its output's newest record is "
               f"{'of unknown age' if age is None else f'{age:.0f} s old'}, over its freshness_sla of "
               f"{sla_seconds:.0f} s. Check the DAG tidemark_ingest__{pipeline} (failed or slow runs), the "
               f"producers, and the Tidemark page")
    alert = {"pipeline": pipeline, "message": message, "freshness_seconds": age, "sla_seconds": sla_seconds,
             "newest_record_at": newest.isoformat() if newest else None}
    log.warning("%s; calling %s", message, notify)
    context = {**(context or {}), "tidemark": alert}
    target = import_string(notify)
    if isinstance(target, type):  # an Airflow notifier: BaseNotifier subclasses render templates from context
        return target(**(notify_kwargs or {}))(context)
    return target(context=context, **(notify_kwargs or {}))


def log_stale_pipeline(context: dict) -> None:
    """The default ``freshness_alert.callback``: the alert as an error in the callback's log."""
    log.error(context["tidemark"]["message"])
