"""The ledger: a Delta table of every pipeline's offset ranges and their history, the source of truth of what was
committed. Rows are appended (planned), then flipped to committed in one Delta commit per batch; nothing else is
ever changed (docs/DESIGN.md, *The ledger*). Read and written with delta-rs (no JVM).

- ``state``: the rows and what they say (``LedgerRow``, ``LedgerState``), pure;
- ``store``: ``Ledger``, the table's reads and its conditional commits;
- ``migrations``: schema versions and the chain of migrations between them.
"""

__all__ = ["migrations", "state", "store"]
