"""bench/keyed_report.py: the keyed table's first batch of inserts reported beside a plain append of the same rows."""

from __future__ import annotations

from bench.keyed_report import summarize


def batch(seconds: float, *actions: tuple[str, float]) -> dict:
    return {"seconds": seconds, "spark": {"actions": [{"what": w, "seconds": s} for w, s in actions]}}


OUT = {"settings": {"changes": 2_000_000, "keys": 200_000, "table_rows": 1_000_000, "big_rows": 5_000_000},
       "started_at": "2026-12-07T16:55:26+00:00", "date": "2026-12-07",
       "setup": {"big_table": batch(116.0, ("collect at merge.py:301 (materialize)", 70.0), ("save", 40.0)),
                 "big_append": batch(80.0, ("save", 72.5))}}


def test_the_first_keyed_batch_is_reported_beside_the_append_of_the_same_rows():
    summary = summarize(OUT)
    snap = summary["snapshot"]
    assert (snap["keyed_seconds"], snap["append_seconds"], snap["seconds_ratio"]) == (116.0, 80.0, 1.45)
    assert snap["keyed_where"]["by_function"] == {"materialize": 70.0, "save": 40.0}
    [row] = [t for t in summary["targets"] if "inserts" in t["target"]]
    assert row == {"target": "keyed table: a first batch of 5,000,000 inserts (each key once, the table created) vs a "
                             "plain append of the same rows (reported, no target) (2026-12-07)",
                   "measured": "1.45x the append's time (116.0 s vs 80.0 s)", "met": True}


def test_no_snapshot_row_without_the_append():
    out = {**OUT, "setup": {"big_table": OUT["setup"]["big_table"]}}
    summary = summarize(out)
    assert "snapshot" not in summary and not any("inserts" in t["target"] for t in summary["targets"])
