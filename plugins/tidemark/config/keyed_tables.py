"""Keyed tables: a pipeline whose records insert, update or delete the row of their key (pure; the
Spark side is ``tidemark.batch.spark.merge``).

A ``keyed`` block names the key columns and, optionally, the ordering and how a delete is recognized::

    keyed:
      keys: [customer_id]        # fields of the decoded value (a tombstone's come from the Kafka key)
      order_by: [updated_at]     # optional: which change of a key is newer; default: Kafka position
      delete_field: op           # optional, with delete_values: a record whose field holds one deletes
      delete_values: [d, delete]
      envelope: debezium         # optional: values are Debezium change events (the row is ``after``)
      delete_retention: 7d       # optional: how long a delete that carries an ordering is remembered
      history: scd2              # optional: keep every version of a key (valid_from, valid_to, is_current)

The protocol (docs/DESIGN.md, *Keyed tables*): a batch's changes are reduced to the newest per key and
applied with one Delta MERGE carrying the batch's marker; changes at offsets the table already applied
(below the ledger's high water of their partition) are skipped, so any re-read changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.value_types import Duration
from tidemark.formats import debezium
from tidemark.formats.record_format import KeyedSpec
from tidemark.formats.records import HISTORY_COLUMNS, RESERVED_COLUMNS

CDC_COLUMNS = ("cdc_op", "cdc_position", "cdc_ts_ms")
"""What a Debezium change event adds to its row: the operation (c, u, r) and its ordering (``source.lsn``
or ``source.pos``, then ``source.ts_ms``)."""
DEBEZIUM_OPS = ("c", "u", "r", "d")


class KeyedConfig(BaseModel):
    """The ``keyed`` block of a pipeline file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[str] = Field(default_factory=list)
    """The key columns: fields of the value (a tombstone's key fields are read from the Kafka key, a JSON
    object such as ``{"id": 1}``, or its text for a single key). With ``envelope: debezium`` they may be left out:
    each batch then takes them from the Kafka key, where Debezium writes the source table's primary key
    (``key_fields``: its JSON object's fields, or with ``key_format: avro`` its record's)."""

    order_by: list[str] = Field(default_factory=list)
    """Fields whose values order the changes of a key (``updated_at``); empty: the Kafka position, sound
    only while each key stays on one partition (a key seen on a second partition fails the batch)."""

    delete_field: str | None = None
    """A field whose value, when it is one of ``delete_values``, makes the record delete its key's row."""

    delete_values: list[str] = Field(default_factory=list)

    envelope: Literal["none", "debezium"] = "none"
    """``debezium``: values are Debezium change events (``op``, ``before``, ``after``, ``source``): JSON with or
    without the JSON converter's ``schema``/``payload`` wrapper, or Avro (the row's columns are the after
    image's fields); the row is the after image (the before image's key for a delete), ordered by
    ``source.lsn`` or ``source.pos``, then ``source.ts_ms``."""

    delete_retention: Duration = Field(default=dt.timedelta(days=7), gt=dt.timedelta(0))
    """How long a delete marker is kept after its key's last ordered delete (``order_by`` or Debezium): while it
    is, a change of the key older than the delete does not bring the key back. The maintenance DAG removes older
    markers (``tidemark.batch.spark.delete_markers.expire``)."""

    history: Literal["none", "scd2"] = "none"
    """``scd2``: the table keeps every version of a key (a slowly changing dimension of type 2), each with
    ``valid_from`` and ``valid_to`` from the ordering and ``is_current``, instead of the newest alone
    (``tidemark.batch.spark.versions``). Needs an ordering: one ``order_by`` field (deletes by ``delete_field``),
    or Debezium's."""

    @property
    def keeps_history(self) -> bool:
        """Whether the table keeps every version of a key (``history`` is not ``none``)."""
        return self.history != "none"


def spec(config: KeyedConfig) -> KeyedSpec:
    """The batch's keyed spec; without ``keys`` (Debezium's from the Kafka key) its keys are filled at plan time
    (``tidemark.batch.schemas.batch_format``)."""
    return KeyedSpec(tuple(config.keys), tuple(config.order_by), config.delete_field, tuple(config.delete_values),
                     config.envelope, CDC_COLUMNS if config.envelope == "debezium" else (), config.history)


def check(config: KeyedConfig, fields: Iterable[str], source: str = "value_schema") -> None:
    """The keys, ordering and delete fields against the value's fields. Raises ValueError naming them."""
    names = set(fields)
    if not config.keys and config.envelope != "debezium":
        raise ValueError("keyed.keys: name the key columns (keys: [id]); only envelope: debezium takes them from the "
                         "Kafka key")
    for what, wanted in (("keys", config.keys), ("order_by", config.order_by),
                         ("delete_field", [config.delete_field] if config.delete_field else [])):
        missing = [n for n in wanted if n not in names]
        if missing:
            raise ValueError(f"keyed.{what}: {', '.join(repr(n) for n in missing)} not among the fields of the "
                             f"{source} ({', '.join(sorted(names))})")
    if len(set(config.keys)) != len(config.keys):
        raise ValueError("keyed.keys: a key column is listed twice")
    if bool(config.delete_field) != bool(config.delete_values):
        raise ValueError("keyed: delete_field and delete_values go together (the field, and the values that delete)")
    if config.envelope == "debezium" and (config.order_by or config.delete_field):
        raise ValueError("keyed: with envelope 'debezium' the ordering (source.lsn or source.pos, then ts_ms) and the "
                         "deletes (op 'd') come from the change event; remove order_by and delete_field")
    clash = [n for n in (*config.keys, *config.order_by) if n.lower() in RESERVED_COLUMNS]
    if clash:
        raise ValueError(f"keyed: {', '.join(clash)} is a column Tidemark adds, not a field of the value")
    _check_history(config, names, source)
    taken = sorted(n for n in names if n.lower() in CDC_COLUMNS)
    if config.envelope == "debezium" and taken:
        raise ValueError(f"the {source} has a field {', '.join(repr(n) for n in taken)}, a column that envelope "
                         f"'debezium' adds ({', '.join(CDC_COLUMNS)}): rename it")


def _check_history(config: KeyedConfig, names: set[str], source: str) -> None:
    """``history: scd2`` needs one ordering value per version (its ``valid_from``) and its own columns free."""
    if not config.keeps_history:
        return
    if config.envelope != "debezium" and len(config.order_by) != 1:
        raise ValueError(f"keyed.history: {config.history} takes each version's valid_from and valid_to from the "
                         f"ordering: name one field that orders the changes (keyed.order_by: [updated_at], say), "
                         f"or use envelope: debezium" + (f", not {len(config.order_by)} fields" if config.order_by
                                                           else ""))
    taken = sorted(n for n in names if n.lower() in HISTORY_COLUMNS)
    if taken:
        raise ValueError(f"the {source} has a field {', '.join(repr(n) for n in taken)}, a column that keyed.history "
                         f"adds ({', '.join(HISTORY_COLUMNS)}): rename it")


def kafka_keys(avro_key: str | None, key_fields: Iterable[str] | None, columns: Iterable[str]) -> tuple[str, ...]:
    """A Debezium table's keys when ``keyed.keys`` is left out: the fields of the Kafka key, where Debezium writes the
    source table's primary key (the Avro key's reader schema ``avro_key``, or ``key_fields`` read from a record's
    JSON key by ``tidemark.formats.debezium.key_fields``), each one a column of the row. Raises ValueError saying
    what to do."""
    try:
        keys = debezium.avro_key_fields(avro_key) if avro_key is not None else tuple(key_fields or ())
    except ValueError as exc:
        raise ValueError(f"{exc}: name the key columns in keyed.keys") from None
    if not keys:
        raise ValueError("keyed.keys is left out, so the keys come from the Kafka key, and the batch has no record "
                         "to read one from: name the key columns in keyed.keys")
    names = list(columns)
    missing = [k for k in keys if k not in names]
    if missing:
        raise ValueError(f"keyed.keys is left out, so the keys are the Kafka key's fields ({', '.join(keys)}), and "
                         f"{', '.join(repr(k) for k in missing)} is not a column of the row ({', '.join(names)}); "
                         f"name the key columns in keyed.keys")
    return tuple(keys)


def check_pipeline(keyed: KeyedConfig | None, value_format: str, fields: Iterable[str] | None,
                   value_subject: str | None = None) -> None:
    """The ``keyed`` block against the rest of a pipeline file (Avro fields are checked at plan time, by
    ``tidemark.batch.schemas.batch_format``). Keyed tables take JSON values with an inline ``value_schema`` or Avro
    values: what the tests cover."""
    if keyed is None:
        return
    if not keyed.keys and keyed.envelope != "debezium":
        raise ValueError("keyed.keys: name the key columns (keys: [id]); only envelope: debezium takes them from the "
                         "Kafka key")
    if value_format not in ("json", "avro"):
        raise ValueError(f"keyed needs value_format: json (with an inline value_schema) or avro, not "
                         f"'{value_format}': its keys are fields of the value")
    if value_format == "json" and value_subject:
        raise ValueError(f"keyed needs a JSON value's schema inline (value_schema): a keyed table does not take a "
                         f"JSON Schema from the Schema Registry (value_subject: {value_subject}) yet")
    if value_format == "json" and fields is not None:  # None: the columns come with the data (checked at plan time)
        check(keyed, fields)


Operation = Literal["upsert", "delete", "skip"]
