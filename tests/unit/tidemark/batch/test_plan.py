"""The frozen batch (tidemark.batch.plan.BatchPlan): its JSON and the output commit's metadata."""

from __future__ import annotations

import json

from tidemark.batch.plan import BatchPlan
from tidemark.offsets import OffsetRange


def test_plan_json_round_trip_and_commit_metadata():
    plan = BatchPlan("orders", 3, "/lake/orders", "/lake/_tidemark/offsets", [OffsetRange("o", 0, 1, 4)])
    again = BatchPlan.from_json(plan.to_json())
    assert again == plan and again.total_offsets == 3
    meta = json.loads(plan.commit_metadata())["tidemark"]
    ranges = [{"topic": "o", "partition": 0, "start": 1, "end": 4}]
    assert meta == {"pipeline": "orders", "batch_id": 3, "ranges": ranges}
