"""What a DAG run of ``tidemark_ingest__<pipeline>`` should do, from its trigger form (params) and
its run type. Pure: validated here, with errors that name the form field."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tidemark.batch.backfill import BackfillRequest
from tidemark.errors import ConfigError
from tidemark.kafka.offsets import TopicPartition

MODES = ("incremental", "capped", "backfill_window", "backfill_offsets")


@dataclass(frozen=True)
class RunRequest:
    mode: str
    max_records: int | None = None
    backfill: BackfillRequest | None = None


def _datetime(params: dict, name: str, pipeline: str) -> dt.datetime:
    value = params.get(name)
    if not value:
        raise ConfigError(f"form field '{name}' is required for a time-window backfill", pipeline=pipeline)
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"form field '{name}': '{value}' is not an ISO-8601 date-time", pipeline=pipeline) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _offsets(params: dict, pipeline: str) -> dict[TopicPartition, tuple[int, int]]:
    entries = params.get("offsets") or []
    if not entries:
        raise ConfigError("form field 'offsets' needs at least one {topic, partition, start, end}", pipeline=pipeline)
    offsets: dict[TopicPartition, tuple[int, int]] = {}
    for i, entry in enumerate(entries):
        try:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            start, end = int(entry["start"]), int(entry["end"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"form field 'offsets' item {i}: expected {{topic, partition, start, end}} with whole "
                              f"numbers, got {entry!r}", pipeline=pipeline) from None
        if tp in offsets:
            raise ConfigError(f"form field 'offsets' names {tp} twice", pipeline=pipeline)
        offsets[tp] = (start, end)
    return offsets


MODE_FIELDS = {"capped": ("max_records",), "backfill_window": ("window_start", "window_end", "on_empty_window"),
               "backfill_offsets": ("offsets",)}
"""The trigger form's fields that each mode reads (``incremental`` reads none)."""
FORM_DEFAULTS = {"on_empty_window": "skip", "dry_run": True, "reason": ""}
"""Fields whose form default is a value, not empty: left at it, they count as not filled in."""


def refuse_unused_fields(params: dict, chooser: str, chosen: str, fields: dict[str, tuple[str, ...]],
                         pipeline: str) -> None:
    """A form field filled in for another choice than the one made (a window with mode 'incremental', an
    offset with scenario 'to-earliest') is refused, not ignored: the run would not do what the form says."""
    for owner, names in fields.items():
        for name in names:
            value = params.get(name)
            if owner != chosen and value not in (None, "", [], {}) and value != FORM_DEFAULTS.get(name):
                raise ConfigError(f"form field '{name}' is only used with {chooser} '{owner}', not '{chosen}'; choose "
                                  f"{chooser} '{owner}' or clear the field. Nothing was read or changed",
                                  pipeline=pipeline)


def decide_run(pipeline: str, params: dict, run_type: str, interval: tuple[dt.datetime, dt.datetime] | None
               ) -> RunRequest:
    """Native backfill runs map their data interval to a time window; manual runs follow the form."""
    if run_type == "backfill":
        if interval is None or interval[1] <= interval[0]:
            raise ConfigError("this backfill run has an empty data interval; the DAG's schedule must have "
                              "data intervals", pipeline=pipeline)
        return RunRequest("backfill_window", backfill=BackfillRequest(window=interval))
    mode = params.get("mode") or "incremental"
    if mode not in MODES:
        raise ConfigError(f"form field 'mode': '{mode}' is not one of {', '.join(MODES)}", pipeline=pipeline)
    refuse_unused_fields(params, "mode", mode, MODE_FIELDS, pipeline)
    if mode == "incremental":
        return RunRequest(mode)
    if mode == "capped":
        cap = params.get("max_records")
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ConfigError(f"form field 'max_records' must be a whole number >= 1 for a capped run, got {cap!r}",
                              pipeline=pipeline)
        return RunRequest(mode, max_records=cap)
    if mode == "backfill_window":
        start, end = _datetime(params, "window_start", pipeline), _datetime(params, "window_end", pipeline)
        if end <= start:
            raise ConfigError("form field 'window_end' must be after 'window_start'", pipeline=pipeline)
        return RunRequest(mode, backfill=BackfillRequest(window=(start, end),
                                                         on_empty_window=params.get("on_empty_window") or "skip"))
    return RunRequest(mode, backfill=BackfillRequest(offsets=_offsets(params, pipeline)))
