"""bench/page.py: a part's section written into the benchmark page, in place, without eating what follows it."""

from __future__ import annotations

from bench.page import write_part

PAGE = """# Benchmarks

## Targets

| target | measured | met |
|---|---|---|
| raw values (2026-11-01) | 1.1x | yes |
| keyed table (2026-11-01) | 0.7x | **no** |

## Keyed tables

old section

Parts not run the last time keep their results: backlog from the run of 2026-11-29.
"""


def test_the_last_section_is_replaced_up_to_the_closing_note(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(PAGE)
    write_part("## Keyed tables", "## Keyed tables\n\nnew section\n", "| keyed table",
               [{"target": "keyed table (2026-12-07)", "measured": "0.93x", "met": False}], doc)
    text = doc.read_text()
    assert "new section" in text and "old section" not in text
    assert text.rstrip().endswith("Parts not run the last time keep their results: backlog from the run of 2026-11-29.")
    assert "| keyed table (2026-12-07) | 0.93x | **no** |" in text and "0.7x" not in text
    assert "| raw values (2026-11-01) | 1.1x | yes |" in text


def test_a_new_section_goes_before_the_closing_note(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(PAGE)
    write_part("## Transforms", "## Transforms\n\nmeasured\n", "| transform", [], doc)
    text = doc.read_text()
    assert text.index("## Keyed tables") < text.index("## Transforms") < text.index("Parts not run the last time")
