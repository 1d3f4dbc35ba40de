"""The shared ledger under contention: many pipelines plan and commit at the same moment on one ledger
table, each in its own process (as separate DAG runs do), and every one of them gets through on its
first try. DESIGN.md promises that the shared ledger never serialises unrelated pipelines into failures:
a user saw `CommitFailedError: ... a concurrent transaction added new data` reach an ingest task from
`Ledger.mark_committed` when 8 pipelines committed at once.

No Kafka and no Spark: these are the ledger's own writes (delta-rs), on the local disk."""

from __future__ import annotations

import multiprocessing
import traceback

import pytest

from tidemark.kafka.offsets import OffsetRange, TopicPartition
from tidemark.ledger.store import COMMITTED, Ledger, planned_rows

pytestmark = pytest.mark.integration

PIPELINES = 12
BATCHES = 2


def _pipeline_life(uri: str, name: str, barrier, results) -> None:
    """Plan and commit BATCHES batches of one pipeline, starting each step together with every other
    pipeline; report the first error instead of raising (the parent asserts)."""
    try:
        ledger = Ledger(uri)
        for batch in range(1, BATCHES + 1):
            ranges = [OffsetRange(name, p, (batch - 1) * 10, batch * 10) for p in range(2)]
            barrier.wait(timeout=120)
            ledger.append(planned_rows(name, batch, ranges, f"run-{batch}"), expected=ledger.state(name).fingerprint)
            barrier.wait(timeout=120)
            ledger.mark_committed(name, batch, {TopicPartition(name, r.partition): (10, 0) for r in ranges})
        results.put((name, None))
    except Exception:  # noqa: BLE001 - any failure is the finding
        barrier.abort()  # the others stop waiting for this one
        results.put((name, traceback.format_exc()))


def test_many_pipelines_planning_and_committing_at_once_all_commit_on_their_first_try(tmp_path):
    uri = str(tmp_path / "_tidemark" / "offsets")
    names = [f"p{i:02d}" for i in range(PIPELINES)]
    # The ledger exists before the race: creating it is a separate, already-tested race
    seed = Ledger(uri)
    seed.append(planned_rows("seed", 1, [OffsetRange("seed", 0, 0, 1)], "run-0"),
                expected=seed.state("seed").fingerprint)

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PIPELINES), context.Queue()
    workers = [context.Process(target=_pipeline_life, args=(uri, n, barrier, results)) for n in names]
    for w in workers:
        w.start()
    outcome = dict(results.get(timeout=600) for _ in workers)
    for w in workers:
        w.join(timeout=60)

    failures = {n: err for n, err in outcome.items() if err}
    assert not failures, "\n".join(f"--- {n}\n{err}" for n, err in failures.items())
    ledger = Ledger(uri)
    for name in names:
        rows = ledger.rows(name)
        assert sorted((r.batch_id, r.partition, r.status, r.start_offset, r.end_offset) for r in rows) == [
            (b, p, COMMITTED, (b - 1) * 10, b * 10) for b in range(1, BATCHES + 1) for p in range(2)], name
        assert ledger.state(name).pending_batch_id is None


@pytest.mark.parametrize("writer", ["same pipeline", "other pipeline"])
def test_a_freeze_on_a_stale_version_conflicts_only_with_a_write_of_its_own_pipeline(tmp_path, writer):
    """What the compare-and-commit relies on in delta-rs: a freeze (an insert-only merge) made on the version whose
    fingerprint was checked fails if a write of the same pipeline (here a blind append, the least a conflict check
    could miss) landed since, and is rebased over another pipeline's write."""
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    from tidemark.ledger import store as ledger_module

    uri = str(tmp_path / "offsets")
    ledger = Ledger(uri)
    for name in ("a", "b"):
        ledger.append(planned_rows(name, 1, [OffsetRange(name, 0, 0, 5)], "run-1"),
                      expected=ledger.state(name).fingerprint)
    stale = ledger._open_for_write()
    other = "a" if writer == "same pipeline" else "b"
    write_deltalake(uri, ledger_module._table(planned_rows(other, 2, [OffsetRange(other, 0, 5, 9)], "run-2")),
                    mode="append")

    rows = planned_rows("a", 3, [OffsetRange("a", 0, 5, 9)], "run-3")
    if writer == "same pipeline":
        with pytest.raises(CommitFailedError):
            ledger_module._insert(stale, rows)
        assert sorted(r.batch_id for r in ledger.rows("a")) == [1, 2]
    else:
        ledger_module._insert(stale, rows)
        assert sorted(r.batch_id for r in ledger.rows("a")) == [1, 3]
