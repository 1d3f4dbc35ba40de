"""The audit (tidemark.audit.live_table): the verdict on per-range counts (pure), and the delta-rs queries on small
output, dead-letter and ledger tables written here with delta-rs (Kafka is not the subject)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from tidemark.audit.live_table import Findings, Missing, audit_tables, judge, summary
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import COMMITTED, PLANNED, Ledger, LedgerRow, fingerprint, planned_rows


def row(batch, partition, start, end, count, kind="batch", status=COMMITTED):
    return LedgerRow("p", batch, kind, status, "t", partition, start, end, record_count=count)


def test_a_range_is_missing_records_when_output_and_dead_letters_number_fewer_than_recorded():
    rows = [row(1, 0, 0, 10, 10), row(1, 1, 0, 10, 8), row(2, 0, 10, 20, 10), row(3, 0, 20, 30, None),
            row(4, 0, 30, 40, 10, status=PLANNED), row(5, 0, 40, 50, 0, kind="gap")]
    found = Findings(records=25, output_counts={(1, "t", 0): 10, (1, "t", 1): 6, (2, "t", 0): 7},
                     dead_letter_counts={(1, "t", 1): 2, (2, "t", 0): 1})
    report = judge("p", "/lake/t", rows, found)
    # 1/t/1: 6 + 2 dead letters = 8 (a compacted or transactional range holds fewer records than offsets);
    # batch 3 has no recorded count (an old release): not judged; planned and gap rows are not checked.
    assert report.missing == [Missing("t", 0, 10, 20, 10, 8, 2)]
    assert report.checked_ranges == 4 and not report.ok
    assert report.to_dict()["missing"] == [{"topic": "t", "partition": 0, "start": 10, "end": 20, "expected": 10,
                                            "found": 8, "batch_id": 2}]


def test_duplicates_or_outside_rows_alone_are_damage():
    rows = [row(1, 0, 0, 2, 2)]
    counts = {(1, "t", 0): 2}
    assert judge("p", "x", rows, Findings(records=2, output_counts=counts)).ok
    assert not judge("p", "x", rows, Findings(records=3, output_counts=counts, duplicated_offsets=1)).ok
    assert not judge("p", "x", rows, Findings(records=3, output_counts=counts, outside_rows=1)).ok


def output_rows(batch: int, partition: int, offsets) -> pa.Table:
    offsets = list(offsets)
    return pa.table({"kafka_topic": ["t"] * len(offsets),
                     "kafka_partition": pa.array([partition] * len(offsets), pa.int32()),
                     "kafka_offset": pa.array(offsets, pa.int64()),
                     "value": [b"v"] * len(offsets),
                     "ingest_batch_id": pa.array([batch] * len(offsets), pa.int64())})


def commit(ledger: Ledger, batch: int, ranges: dict[int, tuple[int, int, int, int]]) -> None:
    """Plan and commit one batch: partition -> (start, end, records, dead letters)."""
    planned = planned_rows("p", batch, [OffsetRange("t", p, s, e) for p, (s, e, _, _) in ranges.items()], "test")
    ledger.append(planned, expected=ledger.state("p").fingerprint if ledger.version() >= 0 else fingerprint([]))
    ledger.mark_committed("p", batch, {TP("t", p): (n, d) for p, (_, _, n, d) in ranges.items()})


def test_the_queries_find_each_kind_of_damage_and_count_dead_letters(tmp_path):
    output, dead, ledger = str(tmp_path / "out"), str(tmp_path / "dead"), Ledger(str(tmp_path / "ledger"))
    commit(ledger, 1, {0: (0, 10, 10, 0), 1: (0, 5, 5, 2)})
    commit(ledger, 2, {0: (10, 20, 10, 0)})
    write_deltalake(output, output_rows(1, 0, range(10)))
    write_deltalake(output, output_rows(1, 1, [0, 1, 3]), mode="append")  # offsets 2 and 4: dead letters
    write_deltalake(output, output_rows(2, 0, range(10, 20)), mode="append")
    letters = output_rows(1, 1, [2, 4]).append_column("pipeline", pa.array(["p", "p"]))
    write_deltalake(dead, letters)
    # batch 3 wrote its output but its ledger rows are still planned (recovery rolls it forward): not outside
    ledger.append(planned_rows("p", 3, [OffsetRange("t", 0, 20, 22)], "test"), expected=ledger.state("p").fingerprint)
    write_deltalake(output, output_rows(3, 0, [20, 21]), mode="append")
    clean = audit_tables("p", output, dead, ledger.uri)
    assert (clean.ok, clean.checked_ranges, clean.records) == (True, 3, 25)

    write_deltalake(output, output_rows(2, 0, [12, 13]), mode="append")  # a duplicated file
    write_deltalake(output, output_rows(2, 0, [25]), mode="append")  # beyond batch 2's range
    write_deltalake(output, output_rows(9, 1, [7]), mode="append")  # a batch the ledger does not know
    from deltalake import DeltaTable

    DeltaTable(output).delete("ingest_batch_id = 1 AND kafka_partition = 0 AND kafka_offset < 4")
    report = audit_tables("p", output, dead, ledger.uri).to_dict()
    assert report["ok"] is False
    assert report["duplicates"] == [{"topic": "t", "partition": 0, "offset": o, "count": 2} for o in (12, 13)]
    assert report["missing"] == [{"topic": "t", "partition": 0, "start": 0, "end": 10, "expected": 10, "found": 6,
                                  "batch_id": 1}]
    assert report["outside"] == [{"topic": "t", "partition": 0, "offset": 25, "batch_id": 2},
                                 {"topic": "t", "partition": 1, "offset": 7, "batch_id": 9}]
    assert (report["duplicated_offsets"], report["outside_rows"]) == (2, 2)


def test_an_empty_pipeline_is_ok_and_output_without_a_ledger_is_all_outside(tmp_path):
    output, ledger = str(tmp_path / "out"), str(tmp_path / "ledger")
    assert audit_tables("p", output, str(tmp_path / "dead"), ledger).ok
    write_deltalake(output, output_rows(1, 0, range(3)))
    report = audit_tables("p", output, str(tmp_path / "dead"), ledger)
    assert (report.ok, report.outside_rows, report.records) == (False, 3, 3)


def test_duplicates_are_found_window_by_window_in_order_and_the_list_stops_at_the_limit(tmp_path):
    from deltalake import DeltaTable, QueryBuilder

    from tidemark.audit.live_table import _duplicates

    output = str(tmp_path / "out")
    write_deltalake(output, output_rows(1, 0, range(10)))
    write_deltalake(output, output_rows(1, 1, range(10)), mode="append")
    write_deltalake(output, output_rows(2, 1, [1, 2, 7]), mode="append")
    write_deltalake(output, output_rows(2, 0, [9, 0]), mode="append")
    builder = QueryBuilder().register("output", DeltaTable(output))
    listed, total = _duplicates(builder, limit=4, window=3)  # windows [0, 3), [3, 6), [6, 9), [9, 12)
    assert total == 5
    assert [(d["partition"], d["offset"]) for d in listed] == [(0, 0), (0, 9), (1, 1), (1, 2)]
    assert _duplicates(builder, limit=10, window=1000)[1] == 5


def test_every_kind_of_damage_fails_the_audit_and_tidemark_audit_help_names_it(capsys):
    """``DAMAGE_KINDS`` is what ``ok`` judges; the help of ``tidemark audit`` must name every kind of it (the
    offsets in both the output and the dead letters, and the sampled ranges that differ, were missing)."""
    import dataclasses

    import pytest

    from tidemark.audit.live_table import DAMAGE_KINDS, AuditReport
    from tidemark_cli.main import build_parser

    clean = AuditReport("p", "/lake/t", checked_ranges=1, records=2, duplicates=[], duplicated_offsets=0,
                        missing=[], outside=[], outside_rows=0, sample={"verified": 1, "not_retained": 0,
                                                                         "mismatches": []})
    damage = {"duplicated_offsets": {"duplicated_offsets": 1}, "missing": {"missing": [Missing("t", 0, 0, 2, 2, 1, 1)]},
              "outside_rows": {"outside_rows": 1}, "in_both_rows": {"in_both_rows": 1},
              "sample_mismatches": {"sample": {**clean.sample, "mismatches": [{"topic": "t", "partition": 0}]}},
              "duplicate_key_rows": {"keys": ["id"], "duplicate_key_rows": 1},
              "deleted_keys_present": {"keys": ["id"], "deleted_keys_present": 1}}
    assert clean.ok and set(damage) == set(DAMAGE_KINDS)
    for kind, change in damage.items():
        assert not dataclasses.replace(clean, **change).ok, kind

    with pytest.raises(SystemExit):
        build_parser().parse_args(["audit", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for kind, words in DAMAGE_KINDS.items():
        assert words in shown, (kind, shown)


# --- a pipeline with a SQL transform: filtered records counted, output counted by coordinate -------------------

def test_the_records_a_transform_filtered_out_count_with_the_output_and_the_dead_letters():
    """offsets = output records + dead letters + filtered + offsets without a record."""
    rows = [LedgerRow("p", 1, "batch", COMMITTED, "t", 0, 0, 10, record_count=10, filtered_count=3),
            LedgerRow("p", 1, "batch", COMMITTED, "t", 1, 0, 10, record_count=8, filtered_count=1),
            LedgerRow("p", 2, "batch", COMMITTED, "t", 0, 10, 12, record_count=2, filtered_count=2)]  # all dropped
    found = Findings(records=12, output_counts={(1, "t", 0): 6, (1, "t", 1): 6},
                     dead_letter_counts={(1, "t", 0): 1})
    report = judge("p", "/lake/t", rows, found, transformed=True)
    assert report.missing == [Missing("t", 1, 0, 10, 8, 7, 1)]  # 6 + 0 dead + 1 filtered < 8
    assert report.filtered == 6 and report.to_dict()["filtered"] == 6
    found.output_counts[(1, "t", 1)] = 7
    ok = judge("p", "/lake/t", rows, found, transformed=True)
    assert ok.ok and ok.checked_ranges == 3
    assert summary(ok) == ("pipeline 'p': ok: 3 committed ranges, 12 rows in /lake/t (6 filtered by the transform, "
                           "counted in each batch that read them), every committed offset there in exactly one batch")
    plain = judge("p", "/lake/t", rows, found)  # the ledger's filtered counts are counted all the same
    assert plain.ok and plain.filtered is None and "filtered" not in plain.to_dict()
    assert "exactly once" in summary(plain)


def test_a_transformed_output_is_counted_by_coordinate_and_a_duplicate_is_one_in_two_batches(tmp_path):
    output, dead, ledger = str(tmp_path / "out"), str(tmp_path / "dead"), Ledger(str(tmp_path / "ledger"))
    plan = planned_rows("p", 1, [OffsetRange("t", 0, 0, 5)], "test")
    ledger.append(plan, expected=fingerprint([]))
    ledger.mark_committed("p", 1, {TP("t", 0): (5, 1)}, filtered={TP("t", 0): 2})  # 5 read: 1 bad, 2 dropped
    write_deltalake(output, output_rows(1, 0, [0, 0, 0, 3]))  # offset 0 exploded into 3 rows, 1 and 4 dropped
    write_deltalake(dead, output_rows(1, 0, [2]).append_column("pipeline", pa.array(["p"])))
    report = audit_tables("p", output, dead, ledger.uri, transformed=True)
    assert (report.ok, report.records, report.filtered, report.duplicated_offsets) == (True, 4, 2, 0)
    assert "4 rows in" in summary(report)
    assert "(2 filtered by the transform, counted in each batch that read them)" in summary(report)
    as_rows = audit_tables("p", output, dead, ledger.uri)  # without the flag: offset 0 three times, 6 of 5 records
    assert (as_rows.ok, as_rows.duplicated_offsets) == (False, 1)

    write_deltalake(output, output_rows(2, 0, [3, 3]), mode="append")  # offset 3 again, by a batch not its own
    write_deltalake(output, output_rows(1, 0, [3]), mode="append")  # and once more by its own: still 2 batches
    damaged = audit_tables("p", output, dead, ledger.uri, transformed=True).to_dict()
    assert damaged["duplicates"] == [{"topic": "t", "partition": 0, "offset": 3, "count": 2}]
    assert damaged["duplicated_offsets"] == 1 and not damaged["ok"]
    assert damaged["outside"] == [{"topic": "t", "partition": 0, "offset": 3, "batch_id": 2}] * 2
    assert damaged["missing"] == []  # batch 1's range: offsets 0 and 3 distinct, + 1 dead letter + 2 filtered = 5
