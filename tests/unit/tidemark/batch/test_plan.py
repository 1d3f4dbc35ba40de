"""The frozen batch (tidemark.batch.plan.BatchPlan): its JSON and the output commit's metadata."""

from __future__ import annotations

import json

from tidemark.batch.plan import BatchPlan
from tidemark.kafka.offsets import OffsetRange


def test_plan_json_round_trip_and_commit_metadata():
    plan = BatchPlan("orders", 3, "/lake/orders", "/lake/_tidemark/offsets", [OffsetRange("o", 0, 1, 4)])
    again = BatchPlan.from_json(plan.to_json())
    assert again == plan and again.total_offsets == 3
    meta = json.loads(plan.commit_metadata())["tidemark"]
    ranges = [{"topic": "o", "partition": 0, "start": 1, "end": 4}]
    assert meta == {"pipeline": "orders", "batch_id": 3, "ranges": ranges}


def test_what_shapes_the_output_is_frozen_and_a_pending_batch_gets_it_back_whatever_the_file_says_now(tmp_path):
    from tidemark.batch.recovery import changed_settings, pending_plan
    from tidemark.config.pipeline import parse_pipeline
    from tidemark.ledger.store import Ledger, planned_rows

    def pipeline(**changed):
        return parse_pipeline({"name": "orders", "topics": ["o"], "table": str(tmp_path / "orders"),
                               "value_format": "json", "value_schema": {"id": "bigint", "name": "string"},
                               "keyed": {"keys": ["id"]}, "transform": "SELECT * FROM records WHERE id > 0",
                               **changed}, "test")

    ledger = Ledger(str(tmp_path / "ledger"))
    ranges = [OffsetRange("o", 0, 0, 5)]
    planned = pipeline()
    plan = BatchPlan("orders", 1, planned.table_uri, ledger.uri, ranges, owner="a run",
                     record_format=planned.record_format, isolation_level=planned.isolation_level)
    assert set(json.loads(plan.frozen())) == {"record_format", "partition_by", "isolation_level"}
    ledger.append(planned_rows("orders", 1, ranges, "a run", frozen_plan=plan.frozen()),
                  expected=ledger.state("orders").fingerprint)

    edited = pipeline(isolation_level="read_uncommitted", transform="SELECT * FROM records",
                      keyed={"keys": ["name"]}, partition_by=["name"])
    again = pending_plan(edited, ledger, ledger.state("orders"))
    assert (again.batch_id, again.ranges, again.owner, again.recovered) == (1, ranges, "a run", True)
    assert (again.record_format, again.isolation_level, again.partition_by) == (
        plan.record_format, "read_committed", [])
    assert again.format.transform == "SELECT * FROM records WHERE id > 0" and again.format.keyed.keys == ("id",)

    # nothing of it written: planned again over the same ranges with the file as it is (recover refreezes it)
    fixed = pending_plan(edited, ledger, ledger.state("orders"), written=False)
    assert (fixed.batch_id, fixed.ranges, fixed.isolation_level, fixed.partition_by) == (
        1, ranges, "read_uncommitted", ["name"])
    assert fixed.format.transform == "SELECT * FROM records" and fixed.format.keyed.keys == ("name",)
    assert changed_settings(plan.frozen(), fixed.frozen()) == [
        "isolation_level", "partition_by", "record_format.keyed", "record_format.transform"]
