"""Ledgers written by older releases (tests/fixtures/ledger_v1*, ledger_v3, ledger_v4, see the README there)
through the migration chain, on real Delta tables with delta-rs: reads leave them alone, the first write migrates
them without changing any pipeline's state, concurrent migrators both succeed, and a ledger from a newer
release is refused untouched. Needs neither Kafka nor Spark."""

from __future__ import annotations

import multiprocessing
import shutil
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tidemark.errors import ConfigError, PipelineBusyError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.ledger import migrations as m
from tidemark.ledger.store import COMMITTED, PLANNED, SCHEMA, Ledger, LedgerRow, RowChanges, fingerprint, planned_rows

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PIPELINES = ("orders", "clicks")
ORDERS_ID = "Yw3IsFJ9Q7uR1mQ3pZ0xAg"


@pytest.fixture(params=["ledger_v1", "ledger_v1_no_topic_id", "ledger_v3", "ledger_v4"])
def old_ledger(request, tmp_path) -> str:
    """A copy of an older ledger: version 1 as the release before schema versions wrote it, and without topic_id;
    version 3 as the last release before the keyed row changes wrote it (the same rows); version 4 as the last
    release before filtered_count wrote it (the same rows and a keyed pipeline's)."""
    target = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, target)
    return str(target)


def fixture_version(uri: str) -> int:
    return {"ledger_v3": 3, "ledger_v4": 4}.get(Path(uri).name, 1)


def files(uri: str) -> dict[str, bytes]:
    root = Path(uri)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def operations_since(uri: str, version: int) -> list[str]:
    """The operations of the commits after ``version``, oldest first."""
    return [h["operation"] for h in sorted(DeltaTable(uri).history(), key=lambda h: h["version"])
            if h["version"] > version]


def steps(uri: str) -> list[str]:
    """The commits migrating a fixture makes: from version 1 to version 2 (adding topic_id when it lacks it), to
    version 3 (adding frozen_schemas), then (from version 3 too) to version 4 (adding the three rows_* columns in
    one commit), then (from version 4 too) to version 5 (adding filtered_count), then to version 6 (adding
    frozen_plan)."""
    to_v5 = ["ADD COLUMN", "SET TBLPROPERTIES"] * 2
    if fixture_version(uri) == 4:
        return to_v5
    to_v4 = ["ADD COLUMN", "SET TBLPROPERTIES", *to_v5]
    if fixture_version(uri) == 3:
        return to_v4
    return [*(["ADD COLUMN"] if "no_topic_id" in uri else []), "SET TBLPROPERTIES", "ADD COLUMN", "SET TBLPROPERTIES",
            *to_v4]


def snapshot(ledger: Ledger) -> dict[str, tuple]:
    return {p: (ledger.state(p), sorted(ledger.rows(p), key=repr)) for p in PIPELINES}


def assert_current(uri: str) -> None:
    table = DeltaTable(uri)
    assert table.metadata().configuration[m.VERSION_PROPERTY] == str(m.CURRENT_VERSION)
    assert [f.name for f in table.schema().fields] == SCHEMA.names


def test_the_fixtures_are_older_ledgers_with_the_expected_state(old_ledger):
    assert m.schema_version(DeltaTable(old_ledger)) == fixture_version(old_ledger)
    ledger = Ledger(old_ledger)
    orders, clicks = ledger.state("orders"), ledger.state("clicks")
    assert orders.positions == {TP("orders", 0): 4, TP("orders", 1): 7}  # batch 1, then the reset of :0
    assert orders.pending_batch_id == 3 and orders.pending_owner == "manual__2024-05-01T13:05:00+00:00"
    assert orders.pending_ranges == [OffsetRange("orders", 0, 4, 12), OffsetRange("orders", 1, 7, 9)]
    assert clicks.positions == {TP("clicks", 0): 12} and clicks.pending_batch_id is None  # gap 5..8 included
    assert clicks.last_batch_id == 4 and clicks.high_water == {TP("clicks", 0): 12}
    has_ids = "no_topic_id" not in old_ledger
    assert orders.topic_ids == ({"orders": ORDERS_ID} if has_ids else {})
    assert ("topic_id" in [f.name for f in DeltaTable(old_ledger).schema().fields]) == has_ids


def test_reading_an_old_ledger_writes_nothing(old_ledger):
    before = files(old_ledger)
    snapshot(Ledger(old_ledger))
    assert files(old_ledger) == before


def test_migration_leaves_every_pipelines_state_and_rows_as_they_were(old_ledger):
    ledger = Ledger(old_ledger)
    before = snapshot(ledger)
    m.migrate(DeltaTable(old_ledger))
    assert_current(old_ledger)
    assert snapshot(ledger) == before


def test_a_second_migration_is_a_no_op(old_ledger):
    m.migrate(DeltaTable(old_ledger))
    migrated = files(old_ledger)
    table = DeltaTable(old_ledger)
    assert m.migrate(table).version() == table.version()
    assert files(old_ledger) == migrated


def test_the_first_append_migrates_and_appends(old_ledger):
    ledger = Ledger(old_ledger)
    version = DeltaTable(old_ledger).version()
    before = snapshot(ledger)
    rows = planned_rows("clicks", 5, [OffsetRange("clicks", 0, 12, 20)], "run-5", topic_ids={"clicks": "new-id"})
    ledger.append(rows, expected=before["clicks"][0].fingerprint)

    assert_current(old_ledger)
    # Ledger.append is an insert-only merge (conflicts only with writes of the same pipeline)
    assert operations_since(old_ledger, version) == [*steps(old_ledger), "MERGE"]
    assert snapshot(ledger)["orders"] == before["orders"]
    assert sorted(ledger.rows("clicks"), key=repr) == sorted(before["clicks"][1] + rows, key=repr)
    state = ledger.state("clicks")
    assert state.pending_batch_id == 5 and state.topic_ids == {"clicks": "new-id"}


@pytest.mark.parametrize("write", ["take_over", "mark_committed"])
def test_the_other_writes_migrate_first_too(old_ledger, write):
    ledger = Ledger(old_ledger)
    state = ledger.state("orders")
    if write == "take_over":
        ledger.take_over("orders", 3, "run-new", expected=state.fingerprint)
        assert ledger.state("orders").pending_owner == "run-new"
    else:
        assert ledger.mark_committed("orders", 3, {TP("orders", 1): (2, 0), TP("orders", 0): (8, 0)},
                                     RowChanges(inserted=5, updated=2, deleted=1), filtered={TP("orders", 1): 1})
        assert ledger.state("orders").positions == {TP("orders", 0): 12, TP("orders", 1): 9}
        # Version 4's columns: the batch's row changes on its first row; every older row reads null in them.
        changes = {(r.batch_id, r.partition): (r.rows_inserted, r.rows_updated, r.rows_deleted)
                   for r in ledger.rows("orders")}
        assert changes.pop((3, 0)) == (5, 2, 1) and set(changes.values()) == {(None, None, None)}
        # Version 5's: the records the transform filtered out, per partition (0 where the mapping has none).
        filtered = {(r.batch_id, r.partition): r.filtered_count for r in ledger.rows("orders")}
        assert filtered.pop((3, 0)) == 0 and filtered.pop((3, 1)) == 1 and set(filtered.values()) == {None}
    assert_current(old_ledger)


def test_a_version_4_ledgers_keyed_row_changes_survive_the_migration(tmp_path):
    uri = str(tmp_path / "ledger_v4")
    shutil.copytree(FIXTURES / "ledger_v4", uri)
    ledger = Ledger(uri)
    before = sorted(ledger.rows("customers"), key=repr)
    assert [(r.batch_id, r.rows_inserted, r.rows_updated, r.rows_deleted) for r in before if r.rows_inserted] == [
        (1, 6, 2, 1)]
    m.migrate(DeltaTable(uri))
    assert_current(uri)
    assert sorted(ledger.rows("customers"), key=repr) == before  # filtered_count: null, as LedgerRow's default


def test_two_concurrent_migrators_both_succeed(old_ledger):
    """Both read the old table before either commits, so one of them must lose its commit, re-read the
    table and find it migrated: each change lands once."""
    version = DeltaTable(old_ledger).version()
    handles = [DeltaTable(old_ledger), DeltaTable(old_ledger)]
    barrier = threading.Barrier(len(handles))
    outcomes: list[object] = []

    def migrate(table: DeltaTable) -> None:
        barrier.wait()
        try:
            outcomes.append(m.schema_version(m.migrate(table)))
        except Exception as exc:  # reported by the assertion below
            outcomes.append(exc)

    threads = [threading.Thread(target=migrate, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcomes == [m.CURRENT_VERSION] * 2
    assert sorted(operations_since(old_ledger, version)) == sorted(steps(old_ledger))
    assert_current(old_ledger)


def _append_in_process(uri: str, pipeline: str, barrier, results) -> None:
    ledger = Ledger(uri)
    state = ledger.state(pipeline)
    barrier.wait()
    try:
        ledger.append(planned_rows(pipeline, state.last_batch_id + 1, [OffsetRange(pipeline, 0, 100, 110)],
                                   f"run-{pipeline}"), expected=state.fingerprint)
        results.put((pipeline, "ok"))
    except Exception as exc:  # reported by the test
        results.put((pipeline, f"{type(exc).__name__}: {exc}"))


def test_two_processes_writing_an_old_ledger_at_once_both_succeed(old_ledger):
    """Two processes (two pipelines) read the old ledger, then append at the same moment: each migrates
    on its first write, the loser of each commit re-reads, and both appends land."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [context.Process(target=_append_in_process, args=(old_ledger, p, barrier, results))
                 for p in ("clicks", "payments")]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=120)
    assert sorted(results.get(timeout=5) for _ in processes) == [("clicks", "ok"), ("payments", "ok")]
    assert_current(old_ledger)
    ledger = Ledger(old_ledger)
    assert ledger.state("clicks").pending_ranges == [OffsetRange("clicks", 0, 100, 110)]
    assert ledger.state("payments").pending_ranges == [OffsetRange("payments", 0, 100, 110)]
    assert operations_since(old_ledger, 0).count("SET TBLPROPERTIES") == len(  # each step once
        m.pending_steps(fixture_version(old_ledger)))


def test_a_ledger_from_a_newer_release_is_refused_and_left_untouched(tmp_path):
    uri = str(tmp_path / "ledger")
    shutil.copytree(FIXTURES / "ledger_v1", uri)
    DeltaTable(uri).alter.set_table_properties({m.VERSION_PROPERTY: "99"}, raise_if_not_exists=False)
    before = files(uri)
    ledger = Ledger(uri)
    attempts = {
        "state": lambda: ledger.state("orders"),
        "rows": lambda: ledger.rows("orders"),
        "append": lambda: ledger.append(planned_rows("clicks", 5, [OffsetRange("clicks", 0, 12, 20)], "run"),
                                        expected=fingerprint([])),
        "take_over": lambda: ledger.take_over("orders", 3, "run", expected=fingerprint([])),
        "mark_committed": lambda: ledger.mark_committed("orders", 3, {TP("orders", 0): (8, 0)}),
        "migrate": lambda: m.migrate(DeltaTable(uri)),
    }
    for name, attempt in attempts.items():
        with pytest.raises(m.LedgerVersionError) as refused:
            attempt()
        message = str(refused.value)
        assert "has schema version 99" in message, name
        assert f"supports schema versions up to {m.CURRENT_VERSION}" in message, name
        assert "Upgrade Tidemark" in message and isinstance(refused.value, ConfigError), name
    assert files(uri) == before


def test_a_new_ledger_is_created_at_the_current_version(tmp_path):
    uri = str(tmp_path / "ledger")
    ledger = Ledger(uri)
    rows = planned_rows("p", 1, [OffsetRange("t", 0, 0, 5)], "run")
    ledger.append(rows, expected=fingerprint([]))
    current = {m.VERSION_PROPERTY: str(m.CURRENT_VERSION)}
    assert DeltaTable(uri, version=0).metadata().configuration == current  # from the start
    assert_current(uri)
    assert ledger.rows("p") == rows
    assert m.migrate(DeltaTable(uri)).version() == DeltaTable(uri).version()


def test_a_ledger_created_but_not_yet_written_reads_empty_and_takes_the_next_append(tmp_path):
    """A crash between the create (Delta version 0) and the first append (version 1) leaves an empty
    ledger at the current version."""
    uri = str(tmp_path / "ledger")
    DeltaTable.create(uri, SCHEMA, partition_by=["pipeline"], configuration=m.new_table_configuration(),
                      raise_if_key_not_exists=False)
    ledger = Ledger(uri)
    assert ledger.rows("p") == [] and ledger.state("p").positions == {}
    ledger.append(planned_rows("p", 1, [OffsetRange("t", 0, 0, 5)], "run"), expected=ledger.state("p").fingerprint)
    assert ledger.state("p").pending_batch_id == 1 and DeltaTable(uri).version() == 1


def test_two_runs_creating_the_ledger_at_once_commit_one_batch(tmp_path):
    """The ledger is created (version 0) and then written (version 1): of two runs of one pipeline that
    both find no ledger, one freezes its batch and the other fails, having written no row. (With delta-rs'
    default commit retries both creates succeeded and both runs froze batch 1: 10 races catch it.)"""
    for attempt in range(10):
        uri = str(tmp_path / f"ledger{attempt}")
        barrier = threading.Barrier(2)
        outcomes: dict[str, object] = {}

        def freeze(run: str, uri: str = uri, barrier: threading.Barrier = barrier,
                   outcomes: dict[str, object] = outcomes) -> None:
            barrier.wait()
            try:
                Ledger(uri).append(planned_rows("p", 1, [OffsetRange("t", 0, 0, 5)], run), expected=fingerprint([]))
                outcomes[run] = "ok"
            except PipelineBusyError as exc:
                outcomes[run] = exc

        threads = [threading.Thread(target=freeze, args=(run,)) for run in ("run-a", "run-b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        winners = [run for run, outcome in outcomes.items() if outcome == "ok"]
        assert len(winners) == 1 and len(outcomes) == 2, outcomes
        rows: list[LedgerRow] = Ledger(uri).rows("p")
        assert [(r.dag_run_id, r.status) for r in rows] == [(winners[0], PLANNED)]
        assert COMMITTED not in {r.status for r in rows}
        assert_current(uri)
