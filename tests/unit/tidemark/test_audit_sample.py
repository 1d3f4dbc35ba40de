"""The sample of `tidemark audit --verify-sample` (tidemark.audit.sample): which ranges are chosen, and the
record digest the Kafka and table checksums add up. The reading itself: tests/integration/test_audit.py."""

from __future__ import annotations

import random

from tidemark.audit.sample import choose, digest
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger.store import COMMITTED, LedgerRow


def committed(batch, partition, start, end, records):
    return LedgerRow("p", batch, "batch", COMMITTED, "t", partition, start, end, records, 0)


def test_only_ranges_with_records_that_kafka_still_retains_are_chosen():
    ranges = [committed(1, 0, 0, 10, 10), committed(2, 0, 10, 20, 10), committed(2, 1, 0, 5, 0),
              committed(3, 0, 20, 30, 10)]
    picked, gone = choose(ranges, {TP("t", 0): 10, TP("t", 1): 0}, 10)
    assert [r.batch_id for r in picked] == [2, 3] and gone == 1
    some, _ = choose(ranges, {TP("t", 0): 0}, 1, random.Random(7))
    assert len(some) == 1 and some[0].record_count


def test_a_digest_changes_with_each_field_and_a_missing_value_is_not_an_empty_one():
    base = digest(5, b"k", 1000, b"v")
    assert base == digest(5, b"k", 1000, b"v")
    assert len({base, digest(6, b"k", 1000, b"v"), digest(5, b"K", 1000, b"v"), digest(5, b"k", 1001, b"v"),
                digest(5, b"k", 1000, b"w"), digest(5, b"k", 1000, None), digest(5, b"k", 1000, b"")}) == 7
    assert digest(5, b"ab", 1, b"c") != digest(5, b"a", 1, b"bc")  # fields are length-prefixed
