"""``lag:`` and ``freshness_alert:`` of a pipeline file: what operators are warned about and whom a missed
``freshness_sla`` tells. What is measured lives in ``tidemark.observe.measurements``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.value_types import Duration, ImportPath

DEFAULT_NOTIFIER = "tidemark_airflow.alerts.log_stale_pipeline"
"""What a missed freshness deadline calls when the pipeline names nothing else: an error in the log."""


class LagSettings(BaseModel):
    """``lag:`` in a pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hold_warning_after: Duration = Field(default=dt.timedelta(minutes=15), gt=dt.timedelta(0))
    """Warn when an open transaction has held records back on a partition for longer than this."""


class FreshnessAlert(BaseModel):
    """``freshness_alert:`` in a pipeline file: whom a missed ``freshness_sla`` tells."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    callback: ImportPath = DEFAULT_NOTIFIER
    """Dotted path of a function (called with ``context`` and ``kwargs``) or of an Airflow notifier class
    (``airflow.providers.slack.notifications.slack.SlackNotifier``, ``...smtp.notifications.smtp.SmtpNotifier``:
    built with ``kwargs``, then called with the context). It must import where Airflow runs callbacks; its module
    is looked for (not imported) wherever the file is read, so a misspelt path is an error of the file."""

    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the callback (a Slack channel, e-mail addresses...)."""
