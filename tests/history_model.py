"""A reference model of history tables (slowly changing dimension type 2: ``keyed: {history: scd2}``; pure Python,
no Spark, no Kafka). tests/integration/test_history_generated.py runs the generated cases of tests/keyed_model.py
through the real broker, Spark and Delta and compares the table and the ledger with this model after every batch;
tests/unit/tidemark/test_history_model.py tests the model itself.

Written independently of the product: every record is applied to its key's events one at a time, in Kafka order,
batch after batch, and the key's rows are rebuilt from its events after each.

* **Modes.** Only those with an ordering: ``order_by`` with one field (``(updated_at,)``; ``op: delete`` with
  ``updated_at`` is an ordered delete) and ``debezium`` (``(source.lsn, source.ts_ms)``; ``c``, ``u``, ``r``
  upsert, ``d`` is an ordered delete).
* **Events per key.** A dict ordering -> event, of the key's upserts and ordered deletes: for each ordering only
  the last arrival counts (a later batch, or within a batch the later offset on the key's partition), whatever
  the kinds (an upsert replaces a delete and the other way round). A redelivered Debezium event has the ordering
  of the original, so it replaces that version (same values, its own ``kafka_offset`` and ``ingest_batch_id``).
* **Tombstones.** Under ``order_by`` a tombstone (null value) carries no ordering: it is a bad record (a dead
  letter, counted bad in the ledger) and changes nothing. Debezium's own tombstone (null value after a ``d``)
  changes nothing and is not bad.
* **Rows.** One per upsert event, with its payload and coordinates (the columns of a keyed table:
  ``keyed_model.columns``), plus ``valid_from`` (the event's ``updated_at``; Debezium: ``source.ts_ms`` as a UTC
  timestamp of millisecond precision, Spark's ``timestamp_millis``; and never earlier than the time of an event
  before it by the ordering: a ``ts_ms`` that went back takes the latest before it), ``valid_to`` (the same of the
  key's next event by ordering, upsert or delete; null when there is none) and ``is_current`` (there is no next
  event). So a
  key whose newest event is a delete has no current row; a late upsert splits the version it falls in (which
  then ends at it); a late delete closes the version it falls in.
* **Ledger counts** per batch, on versions (identified by key and ordering): ``inserted`` absent before the
  batch and present after, ``deleted`` present before and absent after (only a delete at a version's ordering
  removes it), ``updated`` present before and after with any compared column different (payload, coordinates,
  ``valid_from``, ``valid_to``, ``is_current``). The batch that creates the table inserts its rows; a batch that
  changes no row counts (0, 0, 0), as a keyed table's does (Delta commits even a MERGE of no change).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.keyed_model import (
    DELETE,
    NOOP,
    TOMBSTONE,
    UPSERT,
    Case,
    Change,
    Record,
    columns,
    image,
    pipeline_dict,
    schedule,
    updated_at,
)

MODES = ("order_by", "debezium")
"""The modes a history table allows (``position`` has no ordering)."""
PERIOD = ("valid_from", "valid_to", "is_current")
UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def history_pipeline_dict(mode: str, topic: str) -> dict:
    """The pipeline file of a generated history case: the keyed one with ``history: scd2``."""
    if mode not in MODES:
        raise ValueError(f"a history table needs an ordering: {mode!r} is not one of {MODES}")
    pipeline = pipeline_dict(mode, topic)
    return {**pipeline, "keyed": {**pipeline["keyed"], "history": "scd2"}}


def history_columns(mode: str) -> tuple[str, ...]:
    """The history table's columns the comparison covers: a keyed table's, and the version's period."""
    return (*columns(mode), *PERIOD)


def timestamp_millis(ms: int) -> dt.datetime:
    """Spark's ``timestamp_millis``: milliseconds since the Unix epoch as a UTC timestamp (exact, no float)."""
    return UNIX_EPOCH + dt.timedelta(milliseconds=ms)


def starts(mode: str, order: tuple[int, ...]) -> dt.datetime:
    """When the event of ordering ``order`` takes effect: its ``updated_at``, or Debezium's ``source.ts_ms``."""
    return updated_at(order[0]) if mode == "order_by" else timestamp_millis(order[1])


def ordering_of(mode: str, row: dict) -> tuple:
    """The ordering a row (the model's or the table's) is a version of."""
    if mode == "order_by":
        return (row["updated_at"],)
    return (row["cdc_position"], row["cdc_ts_ms"])


@dataclass(frozen=True)
class Event:
    """A key's upsert or ordered delete that counts at its ordering (the last to arrive), and where Kafka held it."""

    change: Change
    topic: str
    partition: int
    offset: int
    batch_id: int


Version = tuple[int, tuple[int, ...]]
"""A row's identity: (key, ordering)."""


@dataclass
class HistoryModel:
    """The history table of a keyed pipeline, record by record: ``apply`` every record of a batch in Kafka order,
    then ``end_batch`` for the batch's ledger counts (``apply_batch`` does both)."""

    mode: str
    topic: str = "t"
    events: dict[int, dict[tuple[int, ...], Event]] = field(default_factory=dict)
    """Per key, ordering -> the event that counts there."""
    bad: int = 0
    """The current batch's bad records (order_by tombstones) so far."""
    last_bad: int = 0
    """The last ended batch's bad records."""
    last_changes: dict[str, list[Version]] = field(default_factory=dict)
    """The last ended batch's versions inserted, updated and deleted."""
    _before: dict[Version, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"a history table needs an ordering: {self.mode!r} is not one of {MODES}")

    def apply(self, change: Change, partition: int, offset: int, batch_id: int) -> str:
        """Apply one record; what it was: ``event`` (it counts at its ordering), ``bad`` or ``nothing``."""
        if change.kind == NOOP:
            return "nothing"
        if change.kind == TOMBSTONE:  # order_by: a null value carries no ordering
            self.bad += 1
            return "bad"
        assert change.kind in (UPSERT, DELETE) and change.order is not None, change
        self.events.setdefault(change.key, {})[change.order] = Event(change, self.topic, partition, offset, batch_id)
        return "event"

    def apply_batch(self, records: Iterable[Record], batch_id: int) -> tuple[int, int, int]:
        for r in records:
            self.apply(r.change, r.partition, r.offset, batch_id)
        return self.end_batch()

    def end_batch(self) -> tuple[int, int, int]:
        """The batch's (inserted, updated, deleted) versions (listed in ``last_changes``); the next batch starts."""
        after = self.rows()
        self.last_changes = {
            "inserted": sorted(v for v in after if v not in self._before),
            "updated": sorted(v for v in after if v in self._before and after[v] != self._before[v]),
            "deleted": sorted(v for v in self._before if v not in after)}
        self._before, self.last_bad, self.bad = after, self.bad, 0
        return tuple(len(versions) for versions in self.last_changes.values())

    def versions(self, key: int) -> list[tuple[tuple[int, ...], dict]]:
        """The rows the table must hold for ``key`` (the compared columns), oldest first, each with its
        ordering."""
        events = self.events.get(key, {})
        orders = sorted(events)
        times, latest = [], None  # each event's time: the latest of its own and those before it by the ordering
        for order in orders:
            latest = starts(self.mode, order) if latest is None else max(latest, starts(self.mode, order))
            times.append(latest)
        rows = []
        for i, order in enumerate(orders):
            event = events[order]
            if event.change.kind != UPSERT:
                continue
            following = i + 1 < len(orders)
            rows.append((order, {**self._row(event), "valid_from": times[i],
                                 "valid_to": times[i + 1] if following else None, "is_current": not following}))
        return rows

    def _row(self, event: Event) -> dict:
        c = event.change
        row = {**image(c), "kafka_topic": event.topic, "kafka_partition": event.partition,
               "kafka_offset": event.offset, "ingest_batch_id": event.batch_id}
        if self.mode == "debezium":
            row.update(cdc_op=c.op, cdc_position=c.order[0], cdc_ts_ms=c.order[1])
        else:
            row.update(op=c.op, updated_at=updated_at(c.order[0]))
        return row

    def table(self) -> dict[int, list[dict]]:
        """Every key's rows, oldest first (keys without a row left out)."""
        held = {k: [row for _, row in self.versions(k)] for k in sorted(self.events)}
        return {k: rows for k, rows in held.items() if rows}

    def rows(self) -> dict[Version, dict]:
        """Every row by its version (key, ordering)."""
        return {(k, order): row for k in sorted(self.events) for order, row in self.versions(k)}

    def current(self) -> dict[int, dict]:
        """The current rows (``is_current``), by key: what a plain keyed table would hold (without the period)."""
        return {k: {c: v for c, v in rows[-1].items() if c not in PERIOD} for k, rows in self.table().items()
                if rows[-1]["is_current"]}


def replay(mode: str, changes: Iterable[Change], partitions: int = 1, topic: str = "t"
           ) -> tuple[HistoryModel, list[tuple[int, int, int]]]:
    """The model after a case's records, batch by batch (as ``keyed_model.schedule`` places them), and each
    batch's ledger counts."""
    model = HistoryModel(mode, topic)
    case = Case(mode, partitions, tuple(changes))
    return model, [model.apply_batch(records, b) for b, records in enumerate(schedule(case), start=1)]
