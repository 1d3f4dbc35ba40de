"""The CLI's plain text: tables (one header line of upper-case column names, then one line per row), and the
summary line of a batch."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(rows: list[dict], columns: Sequence[str]) -> str:
    """``rows`` as aligned columns (None as ``-``)."""
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def summary_line(summary: dict) -> str:
    """``tidemark run``'s last line: what the batch wrote (``batch.status.batch_summary``)."""
    written = f"{summary['records']} records written"
    if "rows" in summary:  # a keyed table: the good changes, and what the MERGE did to the rows
        changed = summary["rows"]
        written = (f"{summary['records']} changes merged (rows: {changed['inserted']} inserted, {changed['updated']} "
                   f"updated, {changed['deleted']} deleted)")
    return (f"pipeline '{summary['pipeline']}': batch {summary['batch_id']} committed: {written}, "
            f"{summary.get('filtered', 0)} filtered, {summary['dead_letters']} dead letters -> {summary['table']} "
            f"(Delta version {summary['delta_version']})")
