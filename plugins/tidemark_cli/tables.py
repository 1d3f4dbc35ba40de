"""The CLI's plain-text tables: one header line of upper-case column names, then one line per row."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(rows: list[dict], columns: Sequence[str]) -> str:
    """``rows`` as aligned columns (None as ``-``)."""
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)
