"""A benchmark part's section and Targets rows in docs/BENCHMARKS.md, for the parts whose results bench/report.py
does not write (the keyed table's, the transform's): written after it, from the part's stored results."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bench.knobs import RESULTS, ROOT

DOC = ROOT / "docs" / "BENCHMARKS.md"
CLOSING = "\nParts not run the last time keep their results"
"""The closing note of the page (bench/report.py): a part's section goes before it, and a section replaced in place
ends there when it is the last one."""


def write_part(title: str, section: str, target_prefix: str, targets: list[dict], doc: Path = DOC) -> None:
    """docs/BENCHMARKS.md with the part's ``section`` (starting with ``title``; replacing an earlier one up to the
    next section or the closing note, else before the closing note, else at the end) and its ``targets``
    (``target``, ``measured``, ``met``) at the end of the Targets table, replacing earlier rows that start with
    ``target_prefix``."""
    text = doc.read_text()
    if title in text:
        start = text.index(title)
        ends = [i for i in (text.find("\n## ", start + len(title)), text.find(CLOSING, start)) if i != -1]
        text = text[:start] + section + ("\n" + text[min(ends):] if ends else "\n")
    else:
        anchor = text.find(CLOSING)
        text = (text.rstrip("\n") + "\n\n" + section + "\n") if anchor == -1 else \
            (text[:anchor] + "\n" + section + "\n" + text[anchor:])
    lines = [line for line in text.split("\n") if not line.startswith(target_prefix)]
    start = lines.index("## Targets")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    last = max(i for i in range(start, end) if lines[i].startswith("|"))
    lines[last + 1:last + 1] = [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else '**no**'} |"
                                for t in targets]
    doc.write_text("\n".join(lines))


def write_stored(result_file: str, what: str, title: str, section: Callable[[dict], str], target_prefix: str,
                 targets: Callable[[dict], list[dict]]) -> None:
    """``python -m bench.<part> --page``: the part's section and Targets rows from its stored result
    (bench/results/RESULT_FILE), or a word that there is none."""
    stored = RESULTS / result_file
    if not stored.exists():
        print(f"no {stored}: docs/BENCHMARKS.md left without a {what} section")
        return
    out = json.loads(stored.read_text())
    write_part(title, section(out), target_prefix, targets(out))
    print(f"wrote the {what} section into {DOC}")
