"""Ledger schema versions and the chain of migrations between them.

The ledger's schema version lives in the Delta table itself, as the table property
``tidemark.ledger.schemaVersion`` (``metaData.configuration`` in the Delta log), so it travels with
the table and changes in the same atomic Delta commits as the schema. A ledger without the property
is version 1 (written by releases before schema versions).

=========  ======================================================================================
version    shape
=========  ======================================================================================
1          no version property; ``dead_letter_count`` and ``topic_id`` may be missing (added by
           later releases; their rows read null)
2          the columns ``V2_COLUMNS`` and the property ``"2"``
3          ``V2_COLUMNS`` and ``frozen_schemas`` (``V3_COLUMNS``), the property ``"3"``
4          ``V3_COLUMNS`` and ``rows_inserted``, ``rows_updated``, ``rows_deleted`` (``V4_COLUMNS``), the
           property ``"4"``
5          ``V4_COLUMNS`` and ``filtered_count`` (``V5_COLUMNS``), the property ``"5"``
6          ``V5_COLUMNS`` and ``frozen_plan`` (``V6_COLUMNS``: every column of ``tidemark.ledger.store.SCHEMA``), the
           property ``"6"``
=========  ======================================================================================

Each step of ``MIGRATIONS`` takes the table from ``from_version`` to ``to_version``: its function
changes the shape idempotently (a no-op when already done), then ``migrate`` records ``to_version``
in the property, in a commit of its own. Every commit is a Delta metadata change, and delta-rs
refuses a metadata change made from a snapshot that another metadata change has since overtaken
(``CommitFailedError``): the loser of two concurrent migrators re-reads the table and finds the work
done. A crash between a step's commits leaves the old version number, so the step runs again.

Readers never migrate; writers migrate first (``tidemark.ledger.store.Ledger``). A version newer than
``CURRENT_VERSION`` is refused (``LedgerVersionError``) before anything is read or written.
Adding a version: freeze its columns, append a step, raise ``CURRENT_VERSION``; never edit a step
that has shipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from tidemark.errors import LedgerConflictError, LedgerVersionError

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

VERSION_PROPERTY = "tidemark.ledger.schemaVersion"
UNVERSIONED = 1
"""The version of a ledger without the property."""
CURRENT_VERSION = 6
_ATTEMPTS = 20

V2_COLUMNS = ("pipeline", "batch_id", "kind", "status", "topic", "partition", "start_offset", "end_offset",
              "record_count", "dead_letter_count", "dag_run_id", "reason", "planned_at", "committed_at", "topic_id")
"""The columns of a version 2 ledger, in order (frozen: a new column is a new version)."""
V3_COLUMNS = (*V2_COLUMNS, "frozen_schemas")
"""The columns of a version 3 ledger, in order: the batch's frozen schemas (Avro) were added."""
V3_ADDED = (pa.field("frozen_schemas", pa.string()),)
V4_COLUMNS = (*V3_COLUMNS, "rows_inserted", "rows_updated", "rows_deleted")
"""The columns of a version 4 ledger, in order: what a keyed batch's MERGE did to the table's rows was added."""
V4_ADDED = (pa.field("rows_inserted", pa.int64()), pa.field("rows_updated", pa.int64()),
            pa.field("rows_deleted", pa.int64()))
V5_COLUMNS = (*V4_COLUMNS, "filtered_count")
"""The columns of a version 5 ledger, in order: the records of each range a pipeline's SQL transform filtered out
was added."""
V5_ADDED = (pa.field("filtered_count", pa.int64()),)
V6_COLUMNS = (*V5_COLUMNS, "frozen_plan")
"""The columns of a version 6 ledger, in order: what shapes a batch's output, frozen with its planned rows, was
added."""
V6_ADDED = (pa.field("frozen_plan", pa.string()),)
V1_OPTIONAL = (pa.field("dead_letter_count", pa.int64()), pa.field("topic_id", pa.string()))
"""Nullable columns that releases before version 2 added over time: a version 1 ledger may lack them."""


class Migration(NamedTuple):
    from_version: int
    to_version: int
    apply: Callable[[DeltaTable], None]
    """Brings the table's shape from ``from_version`` to ``to_version``; idempotent, commits its own
    changes (metadata commits, so a concurrent migrator's commit fails it with CommitFailedError)."""


# --- pure ------------------------------------------------------------------------------------------

def version_of(configuration: Mapping[str, str | None], uri: str = "the ledger") -> int:
    """The schema version a table's configuration (Delta table properties) records."""
    raw = configuration.get(VERSION_PROPERTY)
    if raw is None:
        return UNVERSIONED
    version = int(raw) if raw.strip().isdecimal() else 0
    if version < UNVERSIONED:
        raise LedgerVersionError(
            f"the ledger at {uri} has the table property {VERSION_PROPERTY}={raw!r}, which is not a schema "
            f"version; this Tidemark release supports versions {UNVERSIONED} to {CURRENT_VERSION}. Nothing was "
            f"read or written: restore the property (ALTER TABLE ... SET TBLPROPERTIES) to the version the "
            f"table's columns match.")
    return version


def check_supported(version: int, uri: str = "the ledger", current: int = CURRENT_VERSION) -> None:
    """Refuse a ledger written by a newer release: its columns may mean something this code does not know."""
    if version > current:
        raise LedgerVersionError(
            f"the ledger at {uri} has schema version {version}, and this Tidemark release supports schema "
            f"versions up to {current}: a newer Tidemark has migrated it. Upgrade Tidemark (every scheduler, "
            f"worker and Spark job that uses this ledger) to a release that supports version {version}. "
            f"Nothing was read or written.")


def validate_chain(steps: Sequence[Migration], current: int = CURRENT_VERSION) -> None:
    """The steps lead one by one from UNVERSIONED to ``current``: a programming error otherwise."""
    expected = [(v, v + 1) for v in range(UNVERSIONED, current)]
    actual = [(s.from_version, s.to_version) for s in steps]
    if actual != expected:
        raise ValueError(f"the ledger migration chain {actual} does not lead one version at a time from "
                         f"{UNVERSIONED} to {current} (expected {expected})")


def pending_steps(version: int, steps: Sequence[Migration] | None = None,
                  current: int = CURRENT_VERSION, uri: str = "the ledger") -> list[Migration]:
    """The steps that take a table at ``version`` to ``current``, in order (none when it is there)."""
    steps = MIGRATIONS if steps is None else steps
    validate_chain(steps, current)
    check_supported(version, uri, current)
    return [s for s in steps if s.from_version >= version]


def missing_columns(names: Collection[str], fields: Sequence[pa.Field]) -> list[pa.Field]:
    """The ``fields`` a table with columns ``names`` lacks, in order."""
    return [f for f in fields if f.name not in names]


def new_table_configuration() -> dict[str, str]:
    """The table properties a new ledger is created with: it starts at the current version."""
    return {VERSION_PROPERTY: str(CURRENT_VERSION)}


# --- delta-rs --------------------------------------------------------------------------------------

def schema_version(table: DeltaTable) -> int:
    """The schema version of the table's snapshot (no check against this release)."""
    return version_of(table.metadata().configuration, table.table_uri)


def check_readable(table: DeltaTable) -> None:
    """Refuse to read a ledger from a newer release; an older one reads as it is (no migration on read)."""
    check_supported(schema_version(table), table.table_uri)


def _column_names(table: DeltaTable) -> set[str]:
    return {f.name for f in table.schema().fields}


def _adding(fields: Sequence[pa.Field], doc: str) -> Callable[[DeltaTable], None]:
    """A step that adds ``fields`` the table lacks, in one commit (a no-op when it has them); existing rows read
    null in them."""

    def apply(table: DeltaTable) -> None:
        from deltalake.schema import Field

        missing = missing_columns(_column_names(table), fields)
        if missing:
            table.alter.add_columns([Field.from_arrow(f) for f in missing])
            log.info("ledger %s: added the column(s) %s", table.table_uri, ", ".join(f.name for f in missing))

    apply.__doc__ = doc
    return apply


_v1_to_v2 = _adding(V1_OPTIONAL, "Add the columns a version 1 ledger may lack.")
_v2_to_v3 = _adding(V3_ADDED, "Add ``frozen_schemas`` (older rows: no format with schemas).")
_v3_to_v4 = _adding(V4_ADDED, "Add ``rows_inserted``, ``rows_updated`` and ``rows_deleted`` (appends, and keyed "
                              "batches committed before them, read null).")
_v4_to_v5 = _adding(V5_ADDED, "Add ``filtered_count`` (batches committed before it, none of them transformed).")
_v5_to_v6 = _adding(V6_ADDED, "Add ``frozen_plan`` (a batch pending across the upgrade is executed with the "
                              "pipeline file as it is, as before).")


MIGRATIONS: list[Migration] = [
    Migration(1, 2, _v1_to_v2),
    Migration(2, 3, _v2_to_v3),
    Migration(3, 4, _v3_to_v4),
    Migration(4, 5, _v4_to_v5),
    Migration(5, 6, _v5_to_v6),
]


def _record_version(table: DeltaTable, version: int) -> None:
    # raise_if_not_exists=False: delta-rs otherwise accepts only the properties it knows (delta.*).
    table.alter.set_table_properties({VERSION_PROPERTY: str(version)}, raise_if_not_exists=False)


def migrate(table: DeltaTable, steps: Sequence[Migration] | None = None,
            current: int = CURRENT_VERSION) -> DeltaTable:
    """Bring the ledger to ``current`` and return ``table`` (updated to the newest Delta version when it
    migrated). A no-op, with no commit, for a table already there; refuses a newer one. Safe to run from
    several processes at once: a migrator whose commit loses re-reads the table and continues from the
    version it finds."""
    from deltalake.exceptions import CommitFailedError

    steps = MIGRATIONS if steps is None else steps
    for _ in range(_ATTEMPTS):
        version = schema_version(table)
        pending = pending_steps(version, steps, current, table.table_uri)
        if not pending:
            return table
        try:
            for step in pending:
                # No refresh in between: each commit is made from the snapshot of this migrator's previous
                # one, so any metadata commit of another process in between makes it fail (and re-read).
                step.apply(table)
                _record_version(table, step.to_version)
                log.warning("ledger %s: migrated from schema version %d to %d", table.table_uri,
                            step.from_version, step.to_version)
        except CommitFailedError as exc:
            log.info("ledger %s: another process changed the ledger while this one migrated it (%s); "
                     "re-reading", table.table_uri, exc)
            table.update_incremental()
    raise LedgerConflictError(f"the ledger at {table.table_uri} was too busy to migrate to schema version "
                              f"{current} after {_ATTEMPTS} attempts; nothing was written by this run, retry it")
