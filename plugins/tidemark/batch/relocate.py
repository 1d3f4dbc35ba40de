"""Moving a pipeline's ledger rows with its lake: when the lake root (and with it the default ledger
location, ``<lake root>/_tidemark/offsets``) moves, from the local disk to S3 or to another bucket, the
pipeline's history must come along, or the next plan would find the output full of its batches and
no position (it refuses then: ``prepare.next_batch_id``). ``move_ledger`` copies every row of one
pipeline, unchanged (batch ids, statuses, owners, topic ids, frozen schemas), into the ledger at the new
location in one compare-and-commit append. The old ledger is left as it was: delete it once the
pipeline runs from the new one."""

from __future__ import annotations

import logging

from tidemark import storage
from tidemark.errors import ConfigError
from tidemark.ledger.store import Ledger

log = logging.getLogger(__name__)


def move_ledger(pipeline: str, source: Ledger, target: Ledger) -> int:
    """Copy the pipeline's rows from ``source`` into ``target``, which must hold none of them yet.
    Returns how many rows were copied."""
    if storage.delta_rs_uri(source.uri).rstrip("/") == storage.delta_rs_uri(target.uri).rstrip("/"):
        raise ConfigError(f"the ledger to move from ({source.uri}) is the pipeline's ledger already; nothing to do",
                          pipeline=pipeline)
    rows = source.rows(pipeline)
    if not rows:
        raise ConfigError(f"the ledger at {source.uri} has no row of this pipeline; check the location given with "
                          f"--from (the old lake root followed by /_tidemark/offsets). Nothing was copied.",
                          pipeline=pipeline, location=source.uri)
    state = target.state(pipeline)
    if state.last_batch_id:
        raise ConfigError(f"the ledger at {target.uri} already holds rows of this pipeline (up to entry "
                          f"{state.last_batch_id}); moving would mix two histories, so nothing was copied. Run the "
                          f"pipeline from the ledger that is its history.", pipeline=pipeline, location=target.uri)
    target.append(rows, expected=state.fingerprint, what="moving the ledger")
    log.warning("pipeline '%s': %d ledger rows (entries up to %d) copied from %s to %s", pipeline, len(rows),
                max(r.batch_id for r in rows), source.uri, target.uri)
    return len(rows)
