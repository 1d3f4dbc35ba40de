"""A reference model of keyed tables (pure Python: no Spark, no Kafka) and the Hypothesis strategies that generate
change streams for it; tests/integration/test_keyed_generated.py runs the generated cases through the real broker,
Spark and Delta and compares table and ledger with the model, tests/unit/tidemark/test_keyed_model.py tests the
model itself.

The model is a plain, sequential statement of the documented contract (docs/DESIGN.md, *Keyed tables*), written
independently of the product's reduction: every change is applied to its key's state one at a time, in Kafka
order, batch after batch.

* **Modes.** ``position``: no ``order_by``, a change's ordering is its Kafka offset; every upsert applies, every
  delete (``op: delete``) or tombstone (null value) removes the row. ``order_by``: ordering ``(updated_at,)``;
  an upsert or an ordered delete (``op: delete``, with ``updated_at``) carries an ordering, a tombstone none.
  ``debezium``: JSON change events ordered by ``(source.lsn, source.ts_ms)``; ``c``, ``u``, ``r`` upsert, ``d``
  is an ordered delete, Debezium's own tombstone (null value after a delete) changes nothing.
* **State per key.** The row (the change that wrote it, with its ordering) or nothing, and a delete marker: the
  highest ordering of the ordered deletes seen, or none.
* **Rules** (``order_by`` and ``debezium``). A tombstone removes the row whatever its ordering and leaves the
  marker. An ordered delete with ordering ``o`` raises the marker to ``o`` (always, even when it deletes
  nothing) and removes a row whose ordering is at most ``o``. An upsert with ordering ``o`` is applied when there
  is no row or ``o`` is at or after the row's, and there is no marker or ``o`` is at or after it (equal
  orderings: the later arrival wins).
* **Rows** hold the payload of the change that wrote them, its ``kafka_topic``, ``kafka_partition``,
  ``kafka_offset``, and the id of the batch that read it (``ingest_batch_id``); Debezium's also ``cdc_op``,
  ``cdc_position`` (the LSN) and ``cdc_ts_ms``.
* **Ledger counts** per batch: ``inserted`` keys absent before the batch and present after, ``deleted`` present
  before and absent after, ``updated`` present before and after with at least one upsert of the key applied in
  the batch (an identical change applied again counts).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

MODES = ("position", "order_by", "debezium")
UPSERT, DELETE, TOMBSTONE, NOOP = "upsert", "delete", "tombstone", "noop"
"""What a change does: writes the row; deletes it (``op: delete``, or Debezium's ``d``); a tombstone (null value,
key from the Kafka key); Debezium's own tombstone, which changes nothing."""
DEBEZIUM_UPSERTS = ("c", "u", "r")
EPOCH = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)
"""``updated_at`` of ordering ``o`` is EPOCH + o seconds."""
TS_BASE = 1714558800000
"""Debezium's ``source.ts_ms`` of LSN ``n`` is TS_BASE + 1000 n + a jitter (-1, 0 or 1)."""

SCHEMAS = {
    "position": {"id": "bigint", "name": "string?", "qty": "int?", "op": "string?"},
    "order_by": {"id": "bigint", "name": "string?", "qty": "int?", "op": "string?", "updated_at": "timestamp?"},
    "debezium": {"id": "bigint", "name": "string?", "qty": "int?"},
}
KEYED = {
    "position": {"keys": ["id"], "delete_field": "op", "delete_values": ["delete"]},
    "order_by": {"keys": ["id"], "order_by": ["updated_at"], "delete_field": "op", "delete_values": ["delete"]},
    "debezium": {"keys": ["id"], "envelope": "debezium"},
}
PAYLOAD = {"position": ("id", "name", "qty", "op"), "order_by": ("id", "name", "qty", "op", "updated_at"),
           "debezium": ("id", "name", "qty", "cdc_op", "cdc_position", "cdc_ts_ms")}
COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset", "ingest_batch_id")


def pipeline_dict(mode: str, topic: str) -> dict:
    """The pipeline file of a generated case (parse it with ``tidemark.config.pipeline.parse_pipeline``)."""
    return {"name": topic, "topics": [topic], "table": topic, "value_format": "json", "value_schema": SCHEMAS[mode],
            "keyed": KEYED[mode]}


def columns(mode: str) -> tuple[str, ...]:
    """The table's columns the comparison covers."""
    return (*PAYLOAD[mode], *COORDINATES)


# --- changes and cases ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One change of a key, as produced to Kafka. ``order``: its ordering (``(updated_at,)`` or ``(lsn, ts_ms)``;
    None in position mode and for tombstones); ``op``: the value's ``op`` field (position and order_by: None,
    ``update`` or ``delete``) or Debezium's operation; ``key_text``: the Kafka key is the key's text (``1``)
    rather than JSON (``{"id": 1}``); ``wrapped``: a Debezium event inside the JSON converter's ``schema`` /
    ``payload``; ``redelivered``: an earlier Debezium event of the key sent again."""

    key: int
    batch: int
    kind: str
    order: tuple[int, ...] | None = None
    name: str | None = None
    qty: int | None = None
    op: str | None = None
    key_text: bool = False
    wrapped: bool = False
    redelivered: bool = False

    def __repr__(self) -> str:
        what = {UPSERT: "upsert", DELETE: "delete", TOMBSTONE: "tombstone", NOOP: "debezium-tombstone"}[self.kind]
        if self.op in (*DEBEZIUM_UPSERTS, "d"):
            what = f"{self.op}" + (" (redelivered)" if self.redelivered else "")
        parts = [f"b{self.batch}", what]
        if self.order is not None:  # @updated_at (seconds after EPOCH), or @(lsn, ts_ms)
            parts.append(f"@{self.order[0]}" if len(self.order) == 1 else f"@({self.order[0]}, {self.order[1]})")
        if self.kind == UPSERT:
            parts.append(f"name={self.name!r} qty={self.qty!r}" + (f" op={self.op!r}" if self.op not in (
                None, *DEBEZIUM_UPSERTS) else ""))
        if self.kind == TOMBSTONE:
            parts.append("key=" + (str(self.key) if self.key_text else f'{{"id": {self.key}}}'))
        if self.wrapped:
            parts.append("wrapped")
        return " ".join(parts)


@dataclass(frozen=True)
class Case:
    """A generated case: one topic of ``partitions`` partitions, every key's changes (each key on partition
    ``key % partitions``; a key's changes in order, their batches non-decreasing; batches 1..n each hold one)."""

    mode: str
    partitions: int
    changes: tuple[Change, ...]

    @property
    def batches(self) -> int:
        return max((c.batch for c in self.changes), default=0)

    @property
    def keys(self) -> list[int]:
        return sorted({c.key for c in self.changes})

    def partition_of(self, key: int) -> int:
        return key % self.partitions

    def stream(self, key: int) -> list[Change]:
        return [c for c in self.changes if c.key == key]

    def __repr__(self) -> str:
        lines = [f"Case(mode={self.mode!r}, partitions={self.partitions}, batches={self.batches}, "
                 f"keys={len(self.keys)}, changes={len(self.changes)}):"]
        lines += [f"  key {k} (p{self.partition_of(k)}): " + " | ".join(map(repr, self.stream(k))) for k in self.keys]
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        """Hypothesis's falsifying example shows this repr, one line per key (not its field-by-field layout)."""
        for i, line in enumerate(repr(self).splitlines()):
            if i:
                printer.break_()
            printer.text(line)


@dataclass(frozen=True)
class Record:
    """A change at its place in Kafka."""

    change: Change
    partition: int
    offset: int
    key: bytes
    value: bytes | None


def schedule(case: Case) -> list[list[Record]]:
    """Per batch (1..n), the records produced before it runs, per partition in offset order: the keys' changes of
    that batch interleaved round-robin (each key's in order), offsets counted from 0 on every partition."""
    offsets = dict.fromkeys(range(case.partitions), 0)
    batches = []
    for b in range(1, case.batches + 1):
        records = []
        for p in range(case.partitions):
            queues = [[c for c in case.stream(k) if c.batch == b] for k in case.keys if case.partition_of(k) == p]
            while any(queues):
                for queue in queues:
                    if queue:
                        change = queue.pop(0)
                        key, value = encode(case.mode, change)
                        records.append(Record(change, p, offsets[p], key, value))
                        offsets[p] += 1
        batches.append(records)
    return batches


def updated_at(order: int) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=order)


def _iso(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def image(change: Change) -> dict:
    """The row a change carries (Debezium: its after image, or a delete's before image)."""
    return {"id": change.key, "name": change.name, "qty": change.qty}


def encode(mode: str, change: Change) -> tuple[bytes, bytes | None]:
    """The Kafka key and value of a change."""
    key = (str(change.key) if change.key_text else json.dumps({"id": change.key})).encode()
    if change.kind in (TOMBSTONE, NOOP):
        return key, None
    if mode == "debezium":
        lsn, ts = change.order
        event = {"op": change.op, "before": image(change) if change.op == "d" else None,
                 "after": None if change.op == "d" else image(change), "source": {"lsn": lsn, "ts_ms": ts},
                 "ts_ms": ts + 999}
        if change.wrapped:
            event = {"schema": {"type": "struct", "optional": False, "name": "envelope"}, "payload": event}
        return key, json.dumps(event).encode()
    value = {**image(change), "op": change.op}
    if mode == "order_by":
        value["updated_at"] = _iso(updated_at(change.order[0]))
    return key, json.dumps(value).encode()


# --- the model --------------------------------------------------------------------------------------------------


@dataclass
class Written:
    """The change that wrote a key's row, and where Kafka held it."""

    change: Change
    topic: str
    partition: int
    offset: int
    batch_id: int


@dataclass
class KeyState:
    row: Written | None = None
    marker: tuple[int, ...] | None = None


@dataclass
class KeyedModel:
    """The table of a keyed pipeline, change by change: ``apply`` every record of a batch in Kafka order, then
    ``end_batch`` for the batch's ledger counts."""

    mode: str
    topic: str = "t"
    states: dict[int, KeyState] = field(default_factory=dict)
    _before: set[int] = field(default_factory=set)
    _upserted: set[int] = field(default_factory=set)
    last_changes: dict[str, list[int]] = field(default_factory=dict)

    def present(self) -> set[int]:
        return {k for k, s in self.states.items() if s.row is not None}

    def apply(self, change: Change, partition: int, offset: int, batch_id: int) -> bool:
        """Apply one change; whether it wrote the row."""
        state = self.states.setdefault(change.key, KeyState())
        written = Written(change, self.topic, partition, offset, batch_id)
        if change.kind == NOOP:
            return False
        if self.mode == "position":
            state.row = written if change.kind == UPSERT else None
        elif change.kind == TOMBSTONE:
            state.row = None
        elif change.kind == DELETE:
            state.marker = change.order if state.marker is None else max(state.marker, change.order)
            if state.row is not None and change.order >= state.row.change.order:
                state.row = None
        elif ((state.row is None or change.order >= state.row.change.order)
              and (state.marker is None or change.order >= state.marker)):
            state.row = written
        else:
            return False
        if change.kind == UPSERT:
            self._upserted.add(change.key)
            return True
        return False

    def apply_batch(self, records: Iterable[Record], batch_id: int) -> tuple[int, int, int]:
        for r in records:
            self.apply(r.change, r.partition, r.offset, batch_id)
        return self.end_batch()

    def end_batch(self) -> tuple[int, int, int]:
        """The batch's (inserted, updated, deleted) rows (the keys in ``last_changes``); the next batch starts."""
        after = self.present()
        self.last_changes = {"inserted": sorted(after - self._before),
                             "updated": sorted(after & self._before & self._upserted),
                             "deleted": sorted(self._before - after)}
        self._before, self._upserted = after, set()
        return tuple(len(keys) for keys in self.last_changes.values())

    def row(self, key: int) -> dict | None:
        """The row the table must hold for ``key`` (the compared columns), or None."""
        state = self.states.get(key)
        if state is None or state.row is None:
            return None
        w = state.row
        c = w.change
        row = {**image(c), "kafka_topic": w.topic, "kafka_partition": w.partition, "kafka_offset": w.offset,
               "ingest_batch_id": w.batch_id}
        if self.mode == "debezium":
            row.update(cdc_op=c.op, cdc_position=c.order[0], cdc_ts_ms=c.order[1])
        else:
            row["op"] = c.op
        if self.mode == "order_by":
            row["updated_at"] = updated_at(c.order[0])
        return row

    def table(self) -> dict[int, dict]:
        return {k: self.row(k) for k in sorted(self.present())}


# --- the strategies ---------------------------------------------------------------------------------------------

MAX_CHANGES_PER_KEY = 8
_KINDS = {"position": ("upsert", "upsert", "delete", "tombstone"),
          "order_by": ("upsert", "upsert", "delete", "tombstone"),
          "debezium": ("u", "u", "c", "r", "d", "d", "redeliver", "redeliver")}


@dataclass(frozen=True)
class Step:
    """A raw draw for one change (``build_stream`` makes the change): its kind, how far its ordering is from the
    key's clock (``delta``; late when negative), a tie-breaking ``jitter`` (Debezium's ts_ms), whether it starts a
    later batch, whether the Kafka key is text, wrapped (Debezium), followed by Debezium's tombstone (after a
    ``d``), and which earlier event a redelivery repeats (the ``pick``-th of the key's events, or, right after a
    redelivery, the event after that one: a connector restarted from an older position sends a run of events
    again, in order, and a batch may end within the run)."""

    kind: str
    delta: int = 0
    jitter: int = 0
    advance: bool = False
    key_text: bool = False
    wrapped: bool = False
    tombstone_after: bool = False
    pick: int = 0


@dataclass(frozen=True)
class Profile:
    """What a case's steps are drawn from (a little swarm testing: each case leans one way, so that combinations
    that need several rare steps in a row come up): how late its late changes can be (``lowest`` delta), and how
    often a key's next change falls in a later batch (one in ``advance``)."""

    lowest: int = -2
    advance: int = 3


def profiles() -> st.SearchStrategy[Profile]:
    return st.builds(Profile, lowest=st.integers(1, 4).map(lambda n: -n), advance=st.integers(2, 4))


def steps(mode: str, profile: Profile) -> st.SearchStrategy[Step]:
    """The raw steps. No draw is an integer from 0 (``sampled_from`` is one): Hypothesis's shrinker first runs the
    test once per such draw in the failing case, to see if it picks a branch (``reduce_each_alternative``), which
    against Spark would spend its whole time (5 minutes) on the first few keys."""
    kinds = _KINDS[mode]
    return st.builds(Step, kind=st.integers(1, len(kinds)).map(lambda i: kinds[i - 1]),
                     delta=st.integers(profile.lowest, 3), jitter=st.integers(-1, 1),
                     advance=st.integers(1, profile.advance).map(lambda n: n == profile.advance),
                     key_text=st.booleans(), wrapped=st.booleans(), tombstone_after=st.booleans(),
                     pick=st.integers(1, 8))


def build_stream(mode: str, key: int, first_batch: int, batches: int, raw: list[Step]) -> list[Change]:
    """The changes of one key from its raw steps: orderings on a clock (starting at 10) moved by each step's
    delta, batches from ``first_batch`` advancing (up to ``batches``) where a step says so."""
    changes: list[Change] = []
    clock, batch, resent = 10, first_batch, 0
    for i, s in enumerate(raw):
        if s.advance and i > 0:
            batch = min(batch + 1, batches)
        order = clock + s.delta
        clock = max(clock, order)
        name, qty = f"{key}.{i}", (None if i % 3 == 2 else 10 * key + i)
        op = "update" if i % 2 else None
        if mode == "debezium":
            events = [c for c in changes if c.kind != NOOP and not c.redelivered]  # what the database logged
            if s.kind == "redeliver":
                if not events:
                    continue
                resent = (resent + 1) % len(events) if raw[i - 1].kind == "redeliver" else s.pick % len(events)
                changes.append(replace(events[resent], batch=batch, redelivered=True))
                continue
            order = (order, TS_BASE + 1000 * order + s.jitter)
            if s.kind == "d":
                last = next((c for c in reversed(events) if c.kind == UPSERT), None)
                name, qty = (last.name, last.qty) if last else (None, None)
                changes.append(Change(key, batch, DELETE, order, name, qty, "d", wrapped=s.wrapped))
                if s.tombstone_after:
                    changes.append(Change(key, batch, NOOP))
            else:
                changes.append(Change(key, batch, UPSERT, order, name, qty, s.kind, wrapped=s.wrapped))
            continue
        ordering = (order,) if mode == "order_by" else None
        if s.kind == "tombstone":
            changes.append(Change(key, batch, TOMBSTONE, key_text=s.key_text))
        elif s.kind == "delete":
            changes.append(Change(key, batch, DELETE, ordering, name, qty, "delete", key_text=s.key_text))
        else:
            changes.append(Change(key, batch, UPSERT, ordering, name, qty, op, key_text=s.key_text))
    return changes


def compact(changes: list[Change]) -> tuple[Change, ...]:
    """The same changes with batches renumbered 1..n (a batch no change falls in is left out: it would not run)."""
    used = {b: i for i, b in enumerate(sorted({c.batch for c in changes}), start=1)}
    return tuple(replace(c, batch=used[c.batch]) for c in changes)


@st.composite
def key_streams(draw, mode: str, profile: Profile, batches: int) -> tuple[int, list[Step]]:
    """One key's first batch and raw steps."""
    return draw(st.integers(1, batches)), draw(st.lists(steps(mode, profile), min_size=1, max_size=MAX_CHANGES_PER_KEY))


@st.composite
def cases(draw, mode: str, partitions: int, max_keys: int = 40, max_batches: int = 3) -> Case:
    """A case of ``mode`` on ``partitions`` partitions: 1..``max_keys`` keys, each its own stream of 1..8 changes
    (upserts, late and equal-ordering ones, deletes, tombstones with a JSON or a text key, re-inserts; Debezium's
    c/u/r/d, its tombstones after a d, redelivered earlier events) over 2..``max_batches`` batches (fewer when no
    key has a change in one: ``compact``), with the case's ``Profile``. The keys are drawn as a list of lists of
    keys (with 40 keys at most, about 20 on average; a flat list averages 6), which Hypothesis shrinks by deleting
    keys."""
    batches = draw(st.integers(min(2, max_batches), max_batches))  # one batch: the first of a longer case
    profile = draw(profiles())
    groups = draw(st.lists(st.lists(key_streams(mode, profile, batches), min_size=1, max_size=MAX_CHANGES_PER_KEY),
                           min_size=1, max_size=max(1, math.ceil(max_keys / 4))))
    streams = [s for group in groups for s in group][:max_keys]
    changes: list[Change] = []
    for key, (first, raw) in enumerate(streams, start=1):
        changes += build_stream(mode, key, first, batches, raw)
    return Case(mode, partitions, compact(changes))
