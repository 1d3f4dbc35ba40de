"""Operations on a pipeline's tables besides its batches, each through the same ledger and markers as a batch:

- ``table_maintenance``: OPTIMIZE, VACUUM and checkpoints of the output, dead-letter and ledger tables (delta-rs);
- ``reprocessing``: dead letters decoded again after a fix, as an audited ledger entry that moves no position.

Backfills and offset resets are batches and ledger rows: they live in ``tidemark.batch``.
"""

__all__ = ["reprocessing", "table_maintenance"]
