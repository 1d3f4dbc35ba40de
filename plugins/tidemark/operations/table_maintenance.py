"""Table maintenance (issue 27): OPTIMIZE (bin-packing compaction, optionally Z-ordered), VACUUM and
log checkpoints of a pipeline's output and dead-letter tables, and a VACUUM and checkpoint of the ledger, all with
delta-rs (no JVM), run by the pipeline's maintenance DAG (``tidemark_maintenance__<pipeline>``).

Configured per pipeline (``maintenance:`` in its YAML: ``tidemark.config.maintenance_settings.MaintenanceConfig``).

Why maintenance never corrupts a batch (docs/DESIGN.md, *Table maintenance*): OPTIMIZE rewrites files
with ``dataChange = false`` and changes no row, so the batch's rows, its marker (``txn`` actions, kept in
every checkpoint) and its ``userMetadata`` stay as they were; a commit that loses to a concurrent ingest
commit is resolved by Delta's conflict rules (an append never conflicts with a compaction) and, where
delta-rs cannot resolve it (the batch changed the schema), run again on the new snapshot. VACUUM deletes
only files that no version within the retention references, and the retention can never be shorter than
``VACUUM_FLOOR`` nor than the table's own ``delta.deletedFileRetentionDuration``.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import TYPE_CHECKING

from tidemark import storage
from tidemark.config.maintenance_settings import VACUUM_FLOOR, hours
from tidemark.errors import ConfigError, StorageUnavailableError

if TYPE_CHECKING:
    from tidemark.config.pipeline import PipelineConfig
    from tidemark.storage import ObjectStore

log = logging.getLogger("tidemark")

OPTIMIZE_ATTEMPTS = 5
"""How many times an OPTIMIZE that lost to a concurrent commit it could not be reconciled with (a batch
that changed the table's schema, another OPTIMIZE) is run again on the new snapshot."""

_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)


def table_retention(interval: str | None) -> dt.timedelta | None:
    """A table's ``delta.deletedFileRetentionDuration`` (``interval 30 days``) as a timedelta; None when
    unset or in a form this parser does not know (then delta-rs enforces it itself)."""
    match = _INTERVAL.match(interval or "")
    return dt.timedelta(**{f"{match.group(2).lower()}s": int(match.group(1))}) if match else None


def optimize(uri: str, store: ObjectStore | None, pipeline: str, zorder_by: list[str] | tuple[str, ...] = ()
             ) -> dict:
    """OPTIMIZE one table: compaction, or Z-order by ``zorder_by``. Returns delta-rs' metrics with the
    active file count before and after and the attempts it took; {} when the table does not exist."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, OPTIMIZE_ATTEMPTS + 1):
        table = storage.open_table(uri, store)
        if table is None:
            return {}
        before = len(table.file_uris())
        missing = [c for c in zorder_by if c not in table.schema().to_arrow().names]
        if missing:
            raise ConfigError(f"maintenance.zorder_by names {', '.join(missing)}, not a column of the output table "
                              f"{uri}; fix zorder_by in the pipeline file", pipeline=pipeline, location=uri)
        try:
            metrics = table.optimize.z_order(list(zorder_by)) if zorder_by else table.optimize.compact()
        except CommitFailedError as exc:  # a conflict Delta's rules could not reconcile: the next snapshot can
            log.warning("pipeline '%s': OPTIMIZE of %s lost to a concurrent commit (%s); attempt %d of %d runs it "
                        "again on the new version", pipeline, uri, exc, attempt, OPTIMIZE_ATTEMPTS)
            continue
        except OSError as exc:
            raise storage.storage_failure(exc, uri, store, pipeline) from None
        after = len(storage.open_table(uri, store).file_uris())
        return {**metrics, "files_before": before, "files_after": after, "attempts": attempt}
    raise StorageUnavailableError(f"OPTIMIZE of {uri} lost to concurrent commits {OPTIMIZE_ATTEMPTS} times; nothing "
                                  f"was changed by it, and the next maintenance run tries again", pipeline=pipeline,
                                  location=uri, step="maintenance")


def vacuum(uri: str, store: ObjectStore | None, pipeline: str, retain: dt.timedelta,
           floor: dt.timedelta = VACUUM_FLOOR) -> list[str]:
    """VACUUM one table: delete the files no version of the last ``retain`` references, and the part files
    older than ``retain`` that no commit ever referenced (a full VACUUM: what a writer killed before its
    commit left; a running writer's files are younger than any allowed retention). Refuses a retention
    under ``floor`` or under the table's ``delta.deletedFileRetentionDuration`` (ConfigError, before anything
    is deleted). Returns the deleted files. ``floor`` is lowered only by tests, to see files deleted."""
    table = storage.open_table(uri, store)
    if table is None:
        return []
    own = table_retention(table.metadata().configuration.get("delta.deletedFileRetentionDuration"))
    needed = max(floor, own or floor)
    if retain < needed:
        source = "the table's delta.deletedFileRetentionDuration" if own and own > floor else "the floor"
        raise ConfigError(f"maintenance.vacuum_retain is {hours(retain)}, shorter than {source} of {hours(needed)} "
                          f"on {uri}; raise vacuum_retain to {hours(needed)} or more. Nothing was deleted",
                          pipeline=pipeline, location=uri, step="maintenance")
    try:
        return table.vacuum(retention_hours=int(retain.total_seconds() // 3600), dry_run=False,
                            enforce_retention_duration=floor >= VACUUM_FLOOR, full=True)
    except OSError as exc:
        raise storage.storage_failure(exc, uri, store, pipeline) from None


def checkpoint(uri: str, store: ObjectStore | None, pipeline: str) -> int | None:
    """Write a log checkpoint of the table's current version (what readers load instead of replaying every
    commit; it keeps the ``txn`` markers) and drop the log files older than its
    ``delta.logRetentionDuration`` (30 days by default). Returns the version, None when there is no table."""
    table = storage.open_table(uri, store)
    if table is None:
        return None
    try:
        table.create_checkpoint()
        table.cleanup_metadata()
    except OSError as exc:
        raise storage.storage_failure(exc, uri, store, pipeline) from None
    return table.version()


def maintain(config: PipelineConfig, ledger_uri: str, store: ObjectStore | None) -> dict:
    """The maintenance DAG's task: OPTIMIZE (and Z-order) the output, compact the dead letters (and a history
    table's kept deletes), VACUUM them and the ledger when ``vacuum_retain`` is set, then checkpoint each; a keyed
    table's delete markers older than ``keyed.delete_retention`` are removed. Each step is idempotent, so a retry
    starts again from the top. Returns what was done, per table.

    The ledger is shared by every pipeline, so its VACUUM (table-wide) frees what any pipeline's ledger commits
    left: each batch's commit flip rewrites its planned rows' file, and each compaction (``Ledger._compact``)
    rewrites the pipeline's files, so without it the ledger's folder grows with every batch (docs/BENCHMARKS.md,
    *The ledger's size*). No Tidemark reader needs an old version of the ledger: its history is its rows."""
    settings = config.maintenance
    if settings is None:
        raise ConfigError("has no 'maintenance:' in its pipeline file; add one (optimize_every, and optionally "
                          "zorder_by and vacuum_retain) to maintain its tables", pipeline=config.name)
    report: dict = {"pipeline": config.name}
    tables = [("output", config.table_uri, settings.zorder_by), ("dead_letters", config.dead_letter_uri, ())]
    if config.keyed is not None and config.keyed.keeps_history:  # every delete is kept: a MERGE per batch
        from tidemark.batch.spark.versions import deletes_uri

        tables.append(("history_deletes", deletes_uri(config.table_uri), ()))
    for name, uri, zorder in tables:
        done: dict = {"table": uri, "optimize": optimize(uri, store, config.name, zorder)}
        if settings.vacuum_retain is not None:
            done["vacuumed_files"] = len(vacuum(uri, store, config.name, settings.vacuum_retain))
        done["checkpoint_version"] = checkpoint(uri, store, config.name)
        report[name] = done
        log.info("pipeline '%s': %s table %s maintained: %s", config.name, name, uri, done)
    if config.keyed is not None:  # delete markers past their retention (docs/DESIGN.md, *Keyed tables*)
        from tidemark.batch.spark.delete_markers import expire

        report["output"]["delete_markers_expired"] = expire(config.table_uri, config.keyed.delete_retention, store)
    ledger: dict = {"table": ledger_uri}
    if settings.vacuum_retain is not None:  # the ledger's history is its rows; no reader needs an old version
        ledger["vacuumed_files"] = len(vacuum(ledger_uri, store, config.name, settings.vacuum_retain))
    ledger["checkpoint_version"] = checkpoint(ledger_uri, store, config.name)
    report["ledger"] = ledger
    return report
