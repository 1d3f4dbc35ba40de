"""Write modes: how a batch is written under its marker and recorded in the ledger, one module per mode behind
one interface (``WriteMode``: ``write``, ``finalize``, ``complete``). ``mode_for`` chooses a batch's mode once,
from its plan: the first of ``MODES`` that applies. Adding a mode means adding its module and registering it
here; ``execute_batch`` and ``finalize_batch`` do not change.

==================  ===========================================================================================
mode                writes
==================  ===========================================================================================
history             every version of a key (keyed.history), one MERGE on key and ordering
keyed               the newest change per key, one MERGE (a transform feeding it is a step of this mode)
transform           the SELECT's rows, counted by coordinate (re-reads deduplicated first)
append with dedupe  re-reads (backfills, replays): records already written are skipped, the rest counted first
checked append      values that can be bad: the good records in one pass, then the dead letters
append              raw values: one pass, counted while written
==================  ===========================================================================================
"""

from __future__ import annotations

from tidemark.batch.modes.append import Append
from tidemark.batch.modes.base import Counted, WriteMode
from tidemark.batch.modes.checked_append import CheckedAppend
from tidemark.batch.modes.deduped_append import DedupedAppend
from tidemark.batch.modes.history import History
from tidemark.batch.modes.keyed import Keyed
from tidemark.batch.modes.transformed import Transformed
from tidemark.batch.plan import BatchPlan

__all__ = ["MODES", "Counted", "WriteMode", "mode_for"]

MODES: list[WriteMode] = [History(), Keyed(), Transformed(), DedupedAppend(), CheckedAppend(), Append()]
"""The registered modes, the more specific first."""


def mode_for(plan: BatchPlan) -> WriteMode:
    """The mode that writes ``plan``'s batch: the first of ``MODES`` that applies (``Append`` always does for
    what no other takes)."""
    return next(m for m in MODES if m.applies(plan))
