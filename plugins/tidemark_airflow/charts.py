"""The charts of the Tidemark page: lag, records and duration per batch (and, for a keyed table, rows
changed) over a pipeline's newest ledger entries, computed here (pure) and drawn as inline SVG by the
template (``templates/charts.html``): no script and no CDN, so the page works offline and behind any proxy.

What the ledger can honestly give as lag: it does not record Kafka's latest offset at plan time, but a
batch is planned from the committed position up to the latest offset Kafka had (the last stable offset
under read_committed), unless ``max_offsets_per_run`` capped it. So a batch's offsets *are* the lag when
it was planned; a batch of exactly the cap may have left more behind, and its point says "at least".
Backfills re-read a past range and never move the committed position: they are not lag, so the lag chart
leaves them out and the records chart marks them apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

CHART_ENTRIES = 30
"""How many of the newest ledger entries (of every kind) the charts read."""
WIDTH, HEIGHT = 340, 150
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 12, 28
MAX_SLOT = 36
WRITING = ("batch", "backfill")


@dataclass(frozen=True)
class Mark:
    """One entry on a chart: its bar (or dot) and what it says."""

    batch_id: int
    kind: str
    value: float
    text: str  # the value as printed (e.g. "1,000" or ">= 500")
    x: float
    y: float
    width: float
    committed_at: str | None
    detail: str = ""  # said after the value in the tooltip (e.g. "2 inserted, 1 updated, 0 deleted")


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    unit: str
    note: str
    style: str  # "bars" or "line"
    marks: list[Mark] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)  # (y, label) on the vertical axis
    empty: str = ""
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: float = HEIGHT - BOTTOM

    @property
    def path(self) -> str:
        """The line through the marks' centres (line charts)."""
        return " ".join(f"{m.x + m.width / 2:.1f},{m.y:.1f}" for m in self.marks)

    @property
    def x_labels(self) -> list[Mark]:
        """The marks whose batch id is printed under the axis: all of a few, else about six."""
        step = max(1, math.ceil(len(self.marks) / 6))
        return [m for i, m in enumerate(self.marks) if i % step == 0 or i == len(self.marks) - 1]


def nice_ceiling(value: float) -> float:
    """The axis' top: the smallest 1, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten at or above ``value``
    (1 for 0)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 3, 4, 5, 6, 8, 10) if step * power >= value)


def number(value: float, unit: str = "") -> str:
    """A value as the charts print it: ``1,200`` (offsets, records), ``2.5 s`` or ``40 s`` (durations)."""
    if unit != "s":
        return f"{value:,.0f}"
    return f"{value:.1f} s" if 0 < value < 10 else f"{value:,.0f} s"


def _chart(id: str, title: str, unit: str, note: str, style: str, entries: Sequence[dict],
           values: Sequence[tuple[float, str]], empty: str, details: Sequence[str] | None = None) -> Chart:
    """Lay the entries (oldest first) out left to right, their values scaled to the axis."""
    top = nice_ceiling(max((v for v, _ in values), default=0))
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = min(plot_width / max(len(entries), 1), MAX_SLOT)  # a few batches: narrow bars from the left
    details = details or [""] * len(entries)
    marks = [Mark(batch_id=e["batch_id"], kind=e["kind"], value=v, text=text, x=LEFT + i * slot + slot * 0.15,
                  y=TOP + plot_height * (1 - v / top), width=slot * 0.7, committed_at=e.get("committed_at"),
                  detail=detail)
             for i, (e, (v, text), detail) in enumerate(zip(entries, values, details, strict=True))]
    ticks = [(TOP + plot_height * (1 - f), number(top * f, unit)) for f in (0, 0.5, 1)]
    return Chart(id=id, title=title, unit=unit, note=note, style=style, marks=marks, ticks=ticks,
                 empty=empty if not marks else "")


def committed(entries: Sequence[dict], kinds: Sequence[str] = WRITING) -> list[dict]:
    """The committed entries of ``kinds`` among ``recent_entries``' (newest first), oldest first."""
    return [e for e in reversed(entries) if e["kind"] in kinds and e["status"] == "committed"]


def lag_chart(entries: Sequence[dict], cap: int | None) -> Chart:
    batches = committed(entries, ("batch",))
    values = [(e["offsets"], f">= {e['offsets']:,}" if cap and e["offsets"] >= cap else f"{e['offsets']:,}")
              for e in batches]
    note = ("Offsets each batch found waiting in Kafka when it was planned (its range ran from the committed "
            "position to Kafka's latest offset)" + (f"; a batch capped at max_offsets_per_run ({cap:,}) "
                                                     "left more behind, marked >=" if cap else "") +
            ". Backfills are not lag: they re-read a past range.")
    return _chart("chart-lag", "Lag when each batch was planned", "offsets", note, "line", batches, values,
                  "No committed batch yet: the lag chart starts with the first scheduled batch.")


def records_chart(entries: Sequence[dict]) -> Chart:
    shown = committed(entries)
    values = [(e["records"] or 0, f"{e['records'] or 0:,}") for e in shown]
    filtered = [e.get("filtered") for e in shown]
    return _chart("chart-records", "Records written per batch", "records",
                  "Records each committed batch (blue) or backfill (amber) wrote to the table; dead letters apart"
                  + ("; those a transform filtered out in each tooltip." if any(n is not None for n in filtered)
                     else "."),
                  "bars", shown, values, "No committed batch or backfill yet.",
                  ["" if n is None else f"{n:,} filtered by the transform" for n in filtered])


def duration_chart(entries: Sequence[dict]) -> Chart:
    shown = [e for e in committed(entries) if e["duration_seconds"] is not None]
    values = [(e["duration_seconds"], number(e["duration_seconds"], "s")) for e in shown]
    return _chart("chart-duration", "Time from freezing to commit", "s",
                  "Seconds from the batch's plan being frozen to its commit in the ledger (the Spark job and its "
                  "wait for a slot); blue: batches, amber: backfills.", "bars", shown, values,
                  "No committed batch or backfill yet.")


def has_changes(entry: dict) -> bool:
    """Whether a ledger entry says what its MERGE did to the rows (a keyed batch or backfill)."""
    return entry.get("rows_inserted") is not None


def changes_chart(entries: Sequence[dict]) -> Chart:
    shown = [e for e in committed(entries) if has_changes(e)]
    totals = [e["rows_inserted"] + e["rows_updated"] + e["rows_deleted"] for e in shown]
    return _chart("chart-changes", "Rows changed per batch", "rows",
                  "Rows each committed batch's MERGE inserted, updated or deleted in the keyed table (Delta's "
                  "operation metrics), the three in each tooltip; a replay of applied changes changes none.",
                  "bars", shown, [(t, f"{t:,}") for t in totals], "No committed keyed batch yet.",
                  [f"{e['rows_inserted']:,} inserted, {e['rows_updated']:,} updated, {e['rows_deleted']:,} deleted"
                   for e in shown])


def charts(entries: Sequence[dict], cap: int | None) -> list[Chart]:
    """The page's charts from ``PipelineRun.recent_entries`` (newest first) and the pipeline's cap; a keyed
    pipeline's (one whose entries say what their MERGE did to the rows) also its rows changed per batch."""
    shown = [lag_chart(entries, cap), records_chart(entries), duration_chart(entries)]
    return [*shown, changes_chart(entries)] if any(has_changes(e) for e in entries) else shown
