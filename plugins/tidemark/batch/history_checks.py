"""Plan-time refusals of a history table (``keyed.history``, docs/DESIGN.md, *History tables*) against its output
table: a keyed table and a history table are not each other, and a history table's identity columns do not widen.
Called by ``tidemark.batch.schemas.batch_format`` with the table's columns (delta-rs), before anything is frozen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemark.errors import SchemaChangeError
from tidemark.formats.record_format import RecordFormat
from tidemark.formats.records import HISTORY_COLUMNS

if TYPE_CHECKING:
    from tidemark.config.pipeline import PipelineConfig


def check_history_shape(config: PipelineConfig, base: RecordFormat, columns: Mapping[str, str],
                         fields: set[str]) -> None:
    """A keyed table and a history table (``keyed.history``) are not each other: the first has one row per key
    and no past versions to turn into a history; a keyed MERGE into the second would change every version of a
    key. Refused before anything is frozen, saying what to do. (A keyed table whose values carry fields of those
    names is a keyed table: a history pipeline refuses such fields.)"""
    if base.keyed is None:
        return
    held = set(HISTORY_COLUMNS) <= set(columns) and not set(HISTORY_COLUMNS) & fields
    if base.keyed.keeps_history and not held:
        raise SchemaChangeError(
            f"keyed.history: {base.keyed.history}, but {config.table_uri} is a keyed table without history (no "
            f"{', '.join(HISTORY_COLUMNS)}): the versions before its newest rows are gone. Write the history to a new "
            f"table (a new 'table:' and 'name:') from the earliest offsets Kafka holds (docs/OPERATIONS.md, *History "
            f"tables*)", pipeline=config.name)
    if held and not base.keyed.keeps_history:
        raise SchemaChangeError(
            f"{config.table_uri} is a history table ({', '.join(HISTORY_COLUMNS)}), and the pipeline has no "
            f"keyed.history: its MERGE would change every version of a key. Put 'history: scd2' back in the keyed "
            f"block, or write the keyed table to a new table", pipeline=config.name)


def check_history_widening(config: PipelineConfig, base: RecordFormat, widen: Mapping[str, str]) -> None:
    """A history table identifies a version by its key and ordering, which its kept deletes and its ``valid_from``
    and ``valid_to`` repeat: widening one of those columns alone would leave them apart. Refused at plan time."""
    if base.keyed is None or not base.keyed.keeps_history:
        return
    identity = [c for c in widen if c in (*base.keyed.keys, *base.keyed.order_by)]  # Debezium's: not value fields
    if identity:
        raise SchemaChangeError(
            f"the value's {', '.join(repr(c) for c in identity)} changed type ({', '.join(widen[c] for c in identity)}"
            f"), and in the history table {config.table_uri} it is a key or the ordering, which valid_from, valid_to "
            f"and the kept deletes repeat: a history table does not widen it. Keep the type, or write the history to "
            f"a new table", pipeline=config.name)
