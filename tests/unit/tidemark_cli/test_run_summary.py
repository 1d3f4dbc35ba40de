"""`tidemark run`'s last line (issue 61, 4): what the batch wrote, filtered and sent to the dead letters, and on a
keyed table what its MERGE did to the rows, from the batch summary (``batch.status.batch_summary``; its keyed
numbers from the real stack: tests/integration/test_keyed_deletes.py)."""

from __future__ import annotations

import pytest

from tidemark_cli.table_views import summary_line

pytestmark = pytest.mark.unit

SUMMARY = {"pipeline": "orders", "batch_id": 7, "kind": "batch", "table": "/lake/orders", "ranges": [],
           "records": 990, "filtered": 6, "dead_letters": 4, "delta_version": 12}


def test_an_append_says_what_it_wrote_filtered_and_rejected():
    assert summary_line(SUMMARY) == ("pipeline 'orders': batch 7 committed: 990 records written, 6 filtered, 4 dead "
                                     "letters -> /lake/orders (Delta version 12)")


def test_a_keyed_batch_says_what_its_merge_did_to_the_rows():
    keyed = {**SUMMARY, "rows": {"inserted": 3, "updated": 2, "deleted": 1}}
    assert summary_line(keyed) == ("pipeline 'orders': batch 7 committed: 990 changes merged (rows: 3 inserted, 2 "
                                   "updated, 1 deleted), 6 filtered, 4 dead letters -> /lake/orders (Delta version 12)")
