"""The keyed sample of `tidemark audit --verify-sample` that needs no JVM (tidemark.audit.keyed_sample): which offsets
are read (every committed one Kafka still holds, once, with the format of the batch that applied it), how a
sampled key's rows are judged against its newest change, and the sample's report. The Spark side against a
real broker and table: tests/integration/test_keyed_audit.py."""

from __future__ import annotations

import random
from contextlib import contextmanager

import pytest

from tidemark.audit import keyed_sample
from tidemark.audit.keyed_sample import key_difference, merge_pieces, retained_pieces, verify_keys
from tidemark.audit.live_table import AuditReport, verdict
from tidemark.config.pipeline import parse_pipeline
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import parse_field_type
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.state import COMMITTED, PLANNED, LedgerRow

pytestmark = pytest.mark.unit


def row(batch, partition, start, end, records=..., kind="batch", status=COMMITTED, topic_id=None):
    """A ledger row; ``records`` None: not counted yet (a planned batch's)."""
    return LedgerRow("p", batch, kind, status, "t", partition, start, end,
                     end - start if records is ... else records, 0, topic_id=topic_id)


def spans(pieces):
    return [(p["partition"], p["start"], p["end"], p["batch_id"]) for p in pieces]


def test_every_committed_offset_is_read_once_with_the_batch_that_applied_it():
    """A replay (batch 4, after a reset to 0) and a backfill (5) re-read offsets batches 1-3 applied: only their
    new offsets are read, as theirs. Resets, gaps, empty ranges and (without the table's marker) planned ones add
    nothing."""
    rows = [row(1, 0, 0, 10), row(2, 0, 10, 20), row(2, 1, 0, 5), row(3, 0, 20, 25, kind="reset", records=0),
            row(4, 0, 0, 30), row(5, 1, 2, 8, kind="backfill"), row(6, 0, 30, 32, records=0),
            row(7, 0, 32, 40, status=PLANNED, records=None)]
    pieces, gone = retained_pieces(rows, {TP("t", 0): 0, TP("t", 1): 0})
    assert spans(pieces) == [(0, 0, 10, 1), (0, 10, 20, 2), (1, 0, 5, 2), (0, 20, 30, 4), (1, 5, 8, 5)]
    assert gone == 0


def test_a_range_whose_start_retention_deleted_is_read_from_the_earliest_offset_and_counted_not_retained():
    """Partition 0 keeps offsets from 15: batch 1 is gone, batch 2 is read from 15 on (a key whose newest change
    is at 17 stays in the sample); both count as not retained. Partition 1 is gone entirely (no earliest)."""
    rows = [row(1, 0, 0, 10), row(2, 0, 10, 20), row(3, 0, 20, 30), row(3, 1, 0, 4)]
    pieces, gone = retained_pieces(rows, {TP("t", 0): 15})
    assert spans(pieces) == [(0, 15, 20, 2), (0, 20, 30, 3)] and gone == 3


def test_only_batches_the_table_snapshot_merged_are_read_a_planned_one_among_them():
    """The table's marker says batch 3 is merged (its ledger commit is pending: recovery rolls it forward); batch 4
    committed after the snapshot was taken, so the table read does not hold it yet."""
    rows = [row(1, 0, 0, 10), row(2, 0, 10, 20), row(3, 0, 20, 30, status=PLANNED, records=None), row(4, 0, 30, 40)]
    pieces, _ = retained_pieces(rows, {TP("t", 0): 0}, through=3)
    assert spans(pieces) == [(0, 0, 10, 1), (0, 10, 20, 2), (0, 20, 30, 3)]
    assert spans(retained_pieces(rows, {TP("t", 0): 0})[0]) == [(0, 0, 10, 1), (0, 10, 20, 2), (0, 30, 40, 4)]


def test_ranges_of_an_older_incarnation_of_a_recreated_topic_are_not_read():
    rows = [row(1, 0, 0, 10, topic_id="old"), row(2, 0, 10, 20, topic_id="old"), row(3, 0, 0, 5, topic_id="new")]
    pieces, gone = retained_pieces(rows, {TP("t", 0): 0})
    assert spans(pieces) == [(0, 0, 5, 3)] and gone == 2


def test_consecutive_pieces_that_decode_alike_are_one_read_and_refused_batches_none():
    json_format = RecordFormat("json", (parse_field_type("id", "bigint"),))
    other = RecordFormat("json", (parse_field_type("id", "bigint"), parse_field_type("name", "string?")))
    pieces = [{"topic": "t", "partition": 0, "start": s, "end": e, "batch_id": b}
              for s, e, b in ((0, 10, 1), (10, 20, 2), (20, 30, 3), (30, 40, 4), (45, 50, 5), (50, 60, 6))]
    formats = {1: json_format, 2: json_format, 3: other, 5: other, 6: other}  # batch 4's format was refused
    assert spans(merge_pieces(pieces, formats)) == [(0, 0, 20, 1), (0, 20, 30, 3), (0, 45, 60, 5)]


@pytest.mark.parametrize(("op", "held", "expected"), [
    ("u", [[1, 2, 3]], None),
    ("u", [[1, 9, 3]], ("values differ: qty", ["qty"])),
    ("u", [], ("row missing", [])),
    ("u", [[1, 2, 3], [1, 2, 3]], ("held by 2 rows (a key is one row)", [])),
    ("d", [], None),
    ("d", [[1, 2, 3]], ("row present but deleted", [])),
    ("d", [[1, 2, 3], [4, 5, 6]], ("row present but deleted (2 rows)", [])),
], ids=["equal", "a-column", "missing", "twice", "deleted", "deleted-present", "deleted-present-twice"])
def test_a_sampled_key_is_judged_against_its_newest_change(op, held, expected):
    assert key_difference(op, [1, 2, 3], held, ["kafka_offset", "qty", "name"]) == expected


def keyed_config(tmp_path):
    return parse_pipeline({"name": "p", "topics": ["t"], "table": str(tmp_path / "out"), "value_format": "json",
                           "value_schema": {"id": "bigint", "qty": "int?"}, "keyed": {"keys": ["id"]}}, "test")


def test_verify_keys_hands_spark_the_retained_offsets_and_reports_the_keys_that_differ(tmp_path, monkeypatch):
    rows = [row(1, 0, 0, 10), row(2, 0, 10, 20), row(2, 1, 0, 4)]
    monkeypatch.setattr(keyed_sample, "Ledger", lambda uri, store: type("L", (), {"rows": lambda self, p: rows})())

    class Kafka:
        def earliest(self, tps):
            return {TP("t", 0): 5, TP("t", 1): 0}

    @contextmanager
    def offsets(config, properties):
        yield Kafka()

    monkeypatch.setattr("tidemark.batch.prepare.kafka_offsets", offsets)
    checks = []

    def spark_side(check):
        checks.append(check)
        return {"keys_read": 7, "columns": ["kafka_offset", "qty"], "sampled": [
            {"key": {"id": 1}, "topic": "t", "partition": 0, "offset": 12, "op": "u", "kafka": [1, 2],
             "table": [[1, 3]]},
            {"key": {"id": 2}, "topic": "t", "partition": 1, "offset": 3, "op": "d", "kafka": [4, 5],
             "table": [[0, 5]]},
            {"key": {"id": 3}, "topic": "t", "partition": 0, "offset": 7, "op": "u", "kafka": [6, 7],
             "table": [[6, 7]]}],
            "deleted_present": 1, "deleted_keys": [{"key": {"id": 2}, "topic": "t", "partition": 1, "offset": 3}]}

    sample = verify_keys(keyed_config(tmp_path), {}, "ledger", None, 3, random.Random(1), values=spark_side)
    check = checks[0]
    assert check.keyed and (check.sample_keys, [(r["partition"], r["start"], r["end"]) for r in check.ranges]) == (
        3, [(0, 5, 20), (1, 0, 4)])  # one read per partition: both batches decode alike
    assert check.seed == random.Random(1).getrandbits(31) and check.format_of(1).keyed.keys == ("id",)
    assert sample == {"requested": 3, "verified": 3, "not_retained": 1, "values_compared": True, "keys_read": 7,
                      "mismatches": [
                          {"key": {"id": 1}, "topic": "t", "partition": 0, "offset": 12, "change": "upsert",
                           "table_rows": 1, "columns": ["qty"], "reason": "values differ: qty"},
                          {"key": {"id": 2}, "topic": "t", "partition": 1, "offset": 3, "change": "delete",
                           "table_rows": 1, "columns": [], "reason": "row present but deleted"}],
                      "deleted_keys_present": 1,
                      "deleted_keys": [{"key": {"id": 2}, "topic": "t", "partition": 1, "offset": 3}]}
    report = AuditReport("p", "/lake/out", 3, 5, [], 0, [], [], 0, sample=sample, keys=["id"])
    assert not report.ok and verdict(report).endswith(
        "; 3 sampled keys (of 7 with a change Kafka still holds; 1 committed ranges no longer retained) compared "
        "with their newest change, 2 differing (see the lists above)")
