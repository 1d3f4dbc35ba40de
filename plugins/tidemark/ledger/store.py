"""The ledger: a Delta table of every pipeline's offset ranges and their history, read and
written with delta-rs (no JVM). What the rows mean is ``tidemark.ledger.state`` (pure); this module
stores them: the SQL that reads one pipeline's state, compare-and-commit, the commit flip and
compaction.

The table records its schema version (tidemark.ledger.migrations): reads take an older ledger as it is, the first
write of a process migrates it, and a ledger from a newer release is refused.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping

import pyarrow as pa

from tidemark import storage
from tidemark.errors import LedgerConflictError, PipelineBusyError
from tidemark.kafka.offsets import TopicPartition
from tidemark.ledger import migrations
from tidemark.ledger.state import (
    CHANGE_COLUMNS,
    COMMITTED,
    KIND_BATCH,
    KIND_GAP,
    PLANNED,
    POSITION_KINDS,
    SCHEMA,
    WRITING_KINDS,
    LedgerRow,
    LedgerState,
    RowChanges,
    commit_source,
    derive_state,
    fingerprint,
    gap_rows,
    now,
    planned_rows,
)

__all__ = ["COMMITTED", "KIND_BATCH", "KIND_GAP", "PLANNED", "POSITION_KINDS", "SCHEMA", "WRITING_KINDS", "Ledger",
           "LedgerRow", "LedgerState", "RowChanges", "derive_state", "fingerprint", "gap_rows", "now", "planned_rows"]

log = logging.getLogger(__name__)

# A write that lost a race to another pipeline's commit (a new Delta version in between) is tried again
# after a random wait that grows from 0.05 s to at most 2 s (exponential backoff with full jitter, so
# that the losers of one race do not meet again), for up to this long; only then LedgerConflictError.
# Any one commit takes a few tens of milliseconds, so 50 pipelines committing at the same moment are
# through in a few seconds (tests/integration/test_ledger_contention.py).
RETRY_FOR_S = 120.0


# How many other pipelines' commits delta-rs may rebase a merge over before giving up (each costs it one read
# of the winning commit's log entry, no re-read of the table).
_REBASES = 200


class _LostRace(Exception):
    """Another commit landed on the ledger between this write's read and its commit."""


def _retrying(pipeline: str, what: str, attempt) -> None:
    """``attempt()`` until it does not raise _LostRace, with backoff and jitter, for RETRY_FOR_S."""
    # Imported here, by writes only: reads (status, the page, the CLI) do not pay its import
    from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

    try:
        for trial in Retrying(retry=retry_if_exception_type(_LostRace), stop=stop_after_delay(RETRY_FOR_S),
                              wait=wait_random_exponential(multiplier=0.05, max=2.0),
                              before_sleep=lambda state: log.debug(
                                  "pipeline '%s': another commit reached the ledger first while %s (attempt %d); "
                                  "trying again", pipeline, what, state.attempt_number)):
            with trial:
                attempt()
    except RetryError as exc:
        raise LedgerConflictError(
            f"the ledger was too busy to commit for {RETRY_FOR_S:.0f} s ({exc.last_attempt.attempt_number} "
            f"attempts) while {what}; this run wrote nothing, retry it", pipeline=pipeline) from None

# A pipeline's small files (about one per batch) are compacted into one once there are this many.
COMPACT_AFTER_FILES = 32


def _table(rows: list[LedgerRow]) -> pa.Table:
    columns = {f.name: [getattr(r, f.name) for r in rows] for f in SCHEMA}
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def _quote(text: str) -> str:
    return text.replace("'", "''")


def _topic_id_column(table) -> str:
    """An older ledger (version 1 without topic_id, version 2 without frozen_schemas) reads as it is,
    the columns it lacks null."""
    have = {f.name for f in table.schema().fields}
    return "".join(f", CAST(NULL AS VARCHAR) AS {name}" for name in ("topic_id", "frozen_schemas") if name not in have)


def _query(table, sql: str) -> list[LedgerRow]:
    from deltalake import QueryBuilder

    return [LedgerRow(**rec) for rec in pa.table(QueryBuilder().register("ledger", table).execute(sql).read_all())
            .to_pylist()]


def _select(table, pipeline: str) -> list[LedgerRow]:
    """One pipeline's rows. Uses delta-rs' own query engine: reading through pyarrow datasets
    leaves threads that abort the interpreter at exit (seen with deltalake 1.6.6)."""
    return _query(table, f"SELECT *{_topic_id_column(table)} FROM ledger WHERE pipeline = '{_quote(pipeline)}'")


# The rows a pipeline's state depends on, so that reading the state does not grow with its history:
# planned rows, the newest batch, per partition the newest committed position row and the committed
# row with the highest written end, per topic the newest row with a topic id, and every row of a topic
# seen with more than one id (recreated: derive_state replays its history). derive_state() of these
# rows equals derive_state() of all the pipeline's rows.
_STATE_SQL = """
WITH p AS (SELECT *{no_topic_id} FROM ledger WHERE pipeline = '{pipeline}'),
pos AS (SELECT topic, "partition", MAX(batch_id) AS b FROM p
        WHERE status = '{committed}' AND kind IN ({position}) GROUP BY topic, "partition"),
hw AS (SELECT topic, "partition", MAX(end_offset) AS e FROM p
       WHERE status = '{committed}' AND kind IN ({writing}) GROUP BY topic, "partition"),
ids AS (SELECT topic, MAX(batch_id) AS b, COUNT(DISTINCT topic_id) AS n FROM p
        WHERE topic_id IS NOT NULL GROUP BY topic),
newest AS (SELECT MAX(batch_id) AS b FROM p)
SELECT p.* FROM p CROSS JOIN newest
  LEFT JOIN pos ON p.topic = pos.topic AND p."partition" = pos."partition"
  LEFT JOIN hw ON p.topic = hw.topic AND p."partition" = hw."partition"
  LEFT JOIN ids ON p.topic = ids.topic
WHERE p.status = '{planned}' OR p.batch_id = newest.b OR ids.n > 1
   OR (p.status = '{committed}' AND p.kind IN ({position}) AND p.batch_id = pos.b)
   OR (p.status = '{committed}' AND p.kind IN ({writing}) AND p.end_offset = hw.e)
   OR (p.topic_id IS NOT NULL AND p.batch_id = ids.b)
"""
_TOTALS_SQL = ("SELECT COUNT(*) AS n, MAX(batch_id) AS newest, SUM(CASE WHEN status = '{committed}' THEN 1 ELSE 0 END) "
               "AS committed FROM ledger WHERE pipeline = '{pipeline}'")


def _partition_predicate(pipeline: str) -> str:
    """A merge's condition starts with the literal partition value: delta-rs then reads only the pipeline's
    files, and a concurrent commit conflicts with the merge only if it added or removed files in that same
    partition (any write of the same pipeline, blind appends included); commits of other pipelines are
    rebased over without a conflict (checked with deltalake 1.6.6: tests/integration/test_ledger_contention.py)."""
    return (f"t.pipeline = '{_quote(pipeline)}' AND t.pipeline = s.pipeline AND t.batch_id = s.batch_id AND "
            "t.topic = s.topic AND t.partition = s.partition")


def _insert(table, rows: list[LedgerRow]) -> None:
    """Add one pipeline's rows to ``table`` (the snapshot whose fingerprint the caller checked) as an
    insert-only merge: it commits on top of other pipelines' commits that landed since that snapshot
    (delta-rs rebases it, up to _REBASES versions, no re-read here), and fails with CommitFailedError if the
    pipeline's own rows changed since. No schema_mode="merge": columns change only through the migration
    chain (the table is at the current schema version here)."""
    from deltalake import CommitProperties

    (table.merge(_table(rows), source_alias="s", target_alias="t", predicate=_partition_predicate(rows[0].pipeline),
                 commit_properties=CommitProperties(max_commit_retries=_REBASES))
     .when_not_matched_insert_all().execute())


def _read_state(table, pipeline: str) -> LedgerState:
    """derive_state() of the pipeline's rows, reading only the rows it depends on (_STATE_SQL) and the
    pipeline's totals, so planning stays as fast with 10,000 batches as with 10. The fingerprint
    covers those rows and the totals: runs only append rows (the totals change) or change planned rows
    (all of them are read), so any change another run makes still changes it."""
    from deltalake import QueryBuilder

    def kinds(names: tuple[str, ...]) -> str:
        return ", ".join(f"'{k}'" for k in names)

    names = {"pipeline": _quote(pipeline), "committed": COMMITTED, "planned": PLANNED,
             "position": kinds(POSITION_KINDS), "writing": kinds(WRITING_KINDS),
             "no_topic_id": _topic_id_column(table)}
    builder = QueryBuilder().register("ledger", table)
    rows = _query(table, _STATE_SQL.format(**names))
    totals = pa.table(builder.execute(_TOTALS_SQL.format(**names)).read_all()).to_pylist()[0]
    state = derive_state(rows)
    if totals["n"]:
        state.fingerprint = hashlib.sha256(f"{state.fingerprint} {sorted(totals.items())}".encode()).hexdigest()
    return state


class Ledger:
    """delta-rs access to the ledger table at ``uri``, on ``store`` when it is on object storage."""

    def __init__(self, uri: str, store: storage.ObjectStore | None = None) -> None:
        self.uri = uri
        self.store = store

    def _load(self):
        return storage.open_table(self.uri, self.store)

    def _open(self):
        """The table to read (None when missing): an older schema version reads as it is; a newer one
        is refused (LedgerVersionError)."""
        table = self._load()
        if table is not None:
            migrations.check_readable(table)
        return table

    def _open_for_write(self):
        """The table to write (None when missing), migrated to the current schema version first; a newer
        version is refused before anything is written."""
        table = self._load()
        return None if table is None else migrations.migrate(table)

    def version(self) -> int:
        """The Delta version of the table (-1 when missing), whatever its schema version."""
        table = self._load()
        return -1 if table is None else table.version()

    def rows(self, pipeline: str) -> list[LedgerRow]:
        """Every row of one pipeline."""
        table = self._open()
        return [] if table is None else _select(table, pipeline)

    def batch(self, pipeline: str, batch_id: int) -> list[LedgerRow]:
        """The rows of one ledger entry of a pipeline (a batch, backfill, reset or gap), read with a filter: a
        committed batch's summary (the Airflow asset event of every ingest task) costs no more at 10,000 batches
        than at 10."""
        table = self._open()
        if table is None:
            return []
        return _query(table, f"SELECT *{_topic_id_column(table)} FROM ledger WHERE pipeline = '{_quote(pipeline)}' "
                             f"AND batch_id = {int(batch_id)}")

    def state(self, pipeline: str) -> LedgerState:
        """The pipeline's derived state (positions, pending batch, fingerprint)."""
        table = self._open()
        return derive_state([]) if table is None else _read_state(table, pipeline)

    def recent(self, pipeline: str, limit: int) -> list[LedgerRow]:
        """The pipeline's newest ``limit`` rows (newest batch first, then topic and partition), read with
        a limit, so a long history costs no more than a short one."""
        table = self._open()
        if table is None:
            return []
        return _query(table, f"SELECT *{_topic_id_column(table)} FROM ledger WHERE pipeline = '{_quote(pipeline)}' "
                             f'ORDER BY batch_id DESC, topic, "partition" LIMIT {int(limit)}')

    def recent_batches(self, pipeline: str, batches: int) -> list[LedgerRow]:
        """Every row of the pipeline's newest ``batches`` ledger entries (batches, backfills, resets, gaps)."""
        table = self._open()
        if table is None:
            return []
        name = _quote(pipeline)
        return _query(table, f"SELECT *{_topic_id_column(table)} FROM ledger WHERE pipeline = '{name}' AND batch_id IN "
                             f"(SELECT DISTINCT batch_id FROM ledger WHERE pipeline = '{name}' "
                             f"ORDER BY batch_id DESC LIMIT {int(batches)})")

    def activity(self, pipeline: str) -> dict[tuple[str, str], dict]:
        """Per (kind, status): how many ledger entries, the newest one's batch id, and the newest planned
        and commit times (one aggregate query, whatever the history's length)."""
        from deltalake import QueryBuilder

        table = self._open()
        if table is None:
            return {}
        sql = ("SELECT kind, status, COUNT(DISTINCT batch_id) AS entries, MAX(batch_id) AS batch_id, "
               "MAX(planned_at) AS planned_at, MAX(committed_at) AS committed_at FROM ledger "
               f"WHERE pipeline = '{_quote(pipeline)}' GROUP BY kind, status")
        data = pa.table(QueryBuilder().register("ledger", table).execute(sql).read_all()).to_pylist()
        return {(rec.pop("kind"), rec.pop("status")): rec for rec in data}

    def _create(self, rows: list[LedgerRow]) -> None:
        """Create the ledger at the current schema version, then append ``rows``: Delta version 0 holds the
        schema and the version property (write_deltalake cannot set a property delta-rs does not know,
        DeltaTable.create can), version 1 the rows, committed only on top of version 0. Of two runs creating
        the ledger at once, one fails to create and may then win the append; the other's append fails, and
        either way the caller re-reads and re-checks the fingerprint."""
        from deltalake import CommitProperties, DeltaTable, write_deltalake
        from deltalake.exceptions import CommitFailedError

        # No commit retries for the create either: with delta-rs' default, of two runs creating the ledger at
        # once both "succeed", the second create retried onto version 1 of the table the first made, and its
        # append then never re-checked the fingerprint (both runs froze batch 1; seen under load in CI).
        table = DeltaTable.create(
            storage.delta_rs_uri(self.uri), SCHEMA, storage_options=storage.delta_options(self.uri, self.store),
            mode="error",
            partition_by=["pipeline"], name="tidemark_offsets",
            description="Tidemark offset ledger: one row per pipeline, batch, topic, partition",
            configuration=migrations.new_table_configuration(), raise_if_key_not_exists=False,
            commit_properties=CommitProperties(max_commit_retries=0))
        if table.version() != 0:  # never expected without retries; if it happens, re-check before writing
            raise CommitFailedError(f"the ledger at {self.uri} was created by another run at the same moment")
        write_deltalake(table, _table(rows), mode="append", commit_properties=CommitProperties(max_commit_retries=0))

    def _compare_and_commit(self, pipeline: str, expected: str, commit, what: str) -> None:
        """Run ``commit(table)`` against the latest ledger version only if the pipeline's rows still
        have the ``expected`` fingerprint, and only if no one commits to the ledger in between
        (``max_commit_retries=0``). Commits of other pipelines make it re-check and try again (_retrying);
        a change to this pipeline's rows means another run got there first: PipelineBusyError."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        def attempt() -> None:
            table = self._open_for_write()  # migrating leaves the rows, and so the fingerprint, as they were
            current = _read_state(table, pipeline).fingerprint if table is not None else fingerprint([])
            if current != expected:
                raise PipelineBusyError.held_by(pipeline, "its ledger rows changed while this run was reading them",
                                                what)
            try:
                commit(table)
            except CommitFailedError as exc:
                raise _LostRace() from exc  # another commit (any pipeline) landed first: re-check and retry
            except DeltaError as exc:
                if table is None and self._load() is not None:
                    raise _LostRace() from exc  # another run created the ledger at the same moment
                raise

        _retrying(pipeline, what, attempt)

    def append(self, rows: list[LedgerRow], *, expected: str, what: str = "planning") -> None:
        """Append rows for one pipeline if its rows are still as the caller read them."""
        def commit(table) -> None:
            if table is None:
                self._create(rows)
            else:
                _insert(table, rows)

        self._compare_and_commit(rows[0].pipeline, expected, commit, what)

    def take_over(self, pipeline: str, batch_id: int, owner: str, *, expected: str, reason: str | None = None) -> None:
        """Make ``owner`` the run that executes the pending batch (after its previous owner died). An
        explicit take-over's ``reason`` is added to the rows' reason: the ledger keeps who did it and why."""
        updates = {"dag_run_id": f"'{_quote(owner)}'"}
        if reason:
            updates["reason"] = f"concat_ws('; ', reason, '{_quote(reason)}')"
        self._update_planned(pipeline, batch_id, updates, expected, f"taking over batch {batch_id}")

    def refreeze(self, pipeline: str, batch_id: int, frozen_plan: str, *, expected: str) -> None:
        """Replace what the pending batch's rows hold of its plan (``frozen_plan``): done by recovery only for a
        batch of which nothing was written (``recovery.pending_plan``)."""
        self._update_planned(pipeline, batch_id, {"frozen_plan": f"'{_quote(frozen_plan)}'"}, expected,
                             f"planning batch {batch_id} again")

    def _update_planned(self, pipeline: str, batch_id: int, updates: dict[str, str], expected: str, what: str) -> None:
        from deltalake import CommitProperties

        where = f"pipeline = '{_quote(pipeline)}' AND batch_id = {int(batch_id)} AND status = '{PLANNED}'"
        self._compare_and_commit(pipeline, expected, lambda table: table.update(
            predicate=where, updates=updates, commit_properties=CommitProperties(max_commit_retries=0)), what)

    def mark_committed(self, pipeline: str, batch_id: int, counts: dict[TopicPartition, tuple[int, int]],
                       changes: RowChanges | None = None, filtered: Mapping[TopicPartition, int] | None = None) -> bool:
        """Flip the batch's planned rows to committed with their (records, dead letters) counts, a keyed
        batch's ``changes`` (rows inserted, updated, deleted) on its first row (``tidemark.ledger.state.changes_row``),
        and a transformed batch's records ``filtered`` out per partition (``filtered_count``: 0 for a partition the
        mapping lacks, null on every row without a mapping).
        Idempotent: returns False when nothing was left to flip. The merge reads only the pipeline's
        partition, and a merge that loses a race to another commit is run again on the new version
        (_retrying): it only flips rows still planned, so running it again is safe."""
        source = commit_source(pipeline, batch_id, counts, changes, filtered)
        changed: list[bool] = []
        _retrying(pipeline, f"marking batch {batch_id} committed",
                  lambda: changed.append(self._flip_committed(pipeline, source)))
        if changed[-1]:
            self._compact(pipeline)
        return changed[-1]

    def _flip_committed(self, pipeline: str, source: pa.Table) -> bool:
        from deltalake import CommitProperties, DeltaTable
        from deltalake.exceptions import CommitFailedError

        table = migrations.migrate(DeltaTable(storage.delta_rs_uri(self.uri),  # missing: TableNotFoundError
                                               storage_options=storage.delta_options(self.uri, self.store)))
        stamp = now().isoformat()
        try:
            metrics = (
                table.merge(source, source_alias="s", target_alias="t",
                            predicate=_partition_predicate(pipeline),
                            commit_properties=CommitProperties(max_commit_retries=_REBASES))
                .when_matched_update(
                    updates={"status": f"'{COMMITTED}'", "record_count": "s.record_count",
                             "dead_letter_count": "s.dead_letter_count", **{c: f"s.{c}" for c in CHANGE_COLUMNS},
                             "filtered_count": "s.filtered_count",
                             "committed_at": f"CAST('{stamp}' AS TIMESTAMP)"},
                    predicate=f"t.status = '{PLANNED}'")
                .execute()
            )
        except CommitFailedError as exc:
            raise _LostRace() from exc
        return metrics.get("num_target_rows_updated", 0) > 0

    def _compact(self, pipeline: str) -> None:
        """Rewrite the pipeline's small files (about one per batch) into one once there are
        COMPACT_AFTER_FILES of them, so that reads and commits do not slow down as batches accumulate.
        Rows do not change. Best effort: a failure (a concurrent commit) only postpones it."""
        table = self._load()
        selected = [("pipeline", "=", pipeline)]
        if len(table.file_uris(file_pruning_predicate=selected)) < COMPACT_AFTER_FILES:
            return
        try:
            table.optimize.compact(partition_filters=selected)
        except Exception as exc:
            log.warning("pipeline '%s': compacting its ledger files failed (%s: %s); a later batch tries again",
                        pipeline, type(exc).__name__, exc)
