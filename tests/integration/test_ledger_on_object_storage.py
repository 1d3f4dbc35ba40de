"""The ledger on the local S3-compatible server (`make test` starts it; `make storage-up` by hand):
delta-rs with the settings of an `aws` connection, under both scheme spellings, and the
compare-and-commit that keeps two runs of a pipeline apart."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from tidemark.errors import PipelineBusyError
from tidemark.kafka.offsets import OffsetRange, TopicPartition
from tidemark.ledger.store import Ledger, planned_rows
from tidemark.storage import ObjectStore

pytestmark = pytest.mark.integration

PORT = os.environ.get("S3_PORT", "9000")


@pytest.fixture
def store():
    import boto3

    local = ObjectStore("tidemark", "tidemark-local", endpoint_url=f"http://127.0.0.1:{PORT}")
    client = boto3.client("s3", endpoint_url=local.endpoint_url, region_name=local.region,
                          aws_access_key_id=local.access_key_id, aws_secret_access_key=local.secret_access_key)
    try:
        client.head_bucket(Bucket="lake")
    except Exception as exc:
        pytest.fail(f"no S3 server with a bucket 'lake' answers on 127.0.0.1:{PORT} ({exc}); `make test` starts "
                    f"one, or run `make storage-up`")
    return local


def test_the_ledger_protocol_on_s3_under_either_spelling(store):
    prefix = f"ledger-{uuid.uuid4().hex[:8]}"
    written = Ledger(f"s3a://lake/{prefix}/_tidemark/offsets", store)
    state = written.state("orders")
    ranges = [OffsetRange("orders", 0, 0, 10), OffsetRange("orders", 1, 0, 7)]
    written.append(planned_rows("orders", 1, ranges, "manual__1"), expected=state.fingerprint)
    assert written.mark_committed("orders", 1, {TopicPartition("orders", 0): (10, 0),
                                                TopicPartition("orders", 1): (7, 1)})

    read = Ledger(f"s3://lake/{prefix}/_tidemark/offsets", store).state("orders")  # the other spelling, same table
    assert read.positions == {TopicPartition("orders", 0): 10, TopicPartition("orders", 1): 7}
    assert read.pending_batch_id is None and read.last_batch_id == 1


def test_two_runs_freezing_at_once_on_s3_one_wins(store):
    ledger = Ledger(f"s3://lake/race-{uuid.uuid4().hex[:8]}/_tidemark/offsets", store)
    ledger.append(planned_rows("seed", 1, [OffsetRange("seed", 0, 0, 1)], "manual__0"),
                  expected=ledger.state("seed").fingerprint)  # the ledger exists now
    expected = ledger.state("orders").fingerprint
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def freeze(run: int) -> None:
        barrier.wait()
        try:
            ledger.append(planned_rows("orders", 1, [OffsetRange("orders", 0, 0, 5)], f"manual__{run}"),
                          expected=expected)
            outcomes.append("won")
        except PipelineBusyError:
            outcomes.append("busy")

    threads = [threading.Thread(target=freeze, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["busy", "busy", "busy", "won"]
    assert len({r.dag_run_id for r in ledger.rows("orders")}) == 1
