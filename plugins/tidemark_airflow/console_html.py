"""HTML of the Tidemark page: Jinja2 templates (``templates/``, shipped as package data), escaped."""

from __future__ import annotations

import datetime as dt
from functools import cache


@cache
def _environment():
    from jinja2 import Environment, PackageLoader, select_autoescape

    return Environment(loader=PackageLoader("tidemark_airflow", "templates"), autoescape=select_autoescape(),
                       trim_blocks=True, lstrip_blocks=True)


def age(seconds: float | None) -> str:
    """A duration the way an operator reads it: 45 s, 12 min, 3.5 h, 2.0 d."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def when(iso: str | None) -> str:
    """An ISO timestamp as people read it, to the second in UTC: ``2026-11-26 05:12:03 UTC``."""
    if not iso:
        return "-"
    moment = dt.datetime.fromisoformat(iso)
    moment = moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def since(iso: str | None, now: dt.datetime | None = None) -> str:
    """How long ago an ISO timestamp was: ``3 min ago`` (``-`` when unknown)."""
    if not iso:
        return "-"
    moment = dt.datetime.fromisoformat(iso)
    moment = moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment
    seconds = ((now or dt.datetime.now(dt.UTC)) - moment).total_seconds()
    return f"{age(max(seconds, 0))} ago"


def render(template: str, **values) -> str:
    env = _environment()
    env.filters.update(age=age, when=when, since=since)
    return env.get_template(template).render(**values)
