"""Values written exactly, or not at all (Spark columns; pyspark is imported lazily).

Spark's own conversions change some values without a word: ``from_json`` rounds a decimal to the
column's scale (1.234 into ``decimal(10,2)`` gives 1.23), drops a timestamp's digits beyond the
microsecond and a date's time of day, and reads 1e400 as infinity; a cast cuts a fraction off
(5.5 into ``bigint`` gives 5). Here every such conversion comes with the condition under which it
changed the value, so that the record becomes a bad record that names the field, the value and the
column's type instead:

* ``json_read_type`` is the type ``from_json`` parses a field as (a decimal with room for every digit
  Spark can hold, a timestamp or a date as its text), ``json_field`` the field's value and the
  condition under which it is bad, with ``json_field_error`` its message;
* ``exact_cast`` writes a value of one type into a column of another (``schema_changes: lenient``):
  the cast, and its condition (no value, or a value that does not cast back to the one it came from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.formats.type_changes import normalize_type, sql_name

if TYPE_CHECKING:
    from pyspark.sql import Column

MAX_DIGITS = 38
"""Spark's largest decimal precision."""
_MORE_THAN_MICROS = r"[.,][0-9]{6}0*[1-9]"
"""A fraction of a second with a non-zero digit after the sixth: more precision than Spark's microseconds."""
_EPOCH_SECONDS = r"^\s*-?[0-9]{1,12}\s*$"
"""A JSON integer for a timestamp: seconds since the epoch (as ``from_json`` reads one); 12 digits span
Spark's timestamps."""
_TIME_OF_DAY = r"^\s*[+-]?[0-9]+-[0-9]+-[0-9]+[T ](.*)$"
"""A date's text followed by a time of day (and zone), which a date column cannot keep."""


def _decimal(normal: str) -> tuple[int, int] | None:
    if not normal.startswith("decimal("):
        return None
    precision, scale = normal[len("decimal("):-1].split(",")
    return int(precision), int(scale)


def _wide_decimal(normal: str) -> str | None:
    """A decimal as wide as Spark allows with the same digits before the point: parsed into it, a value
    keeps every digit up to the 38th, so rounding into the column's scale can be seen."""
    decimal = _decimal(normal)
    if decimal is None:
        return None
    precision, scale = decimal
    return f"decimal({MAX_DIGITS},{MAX_DIGITS - (precision - scale)})"


def json_read_type(declared: str) -> str:
    """The type ``from_json`` parses a declared field as: a wide decimal for a decimal, the text for a
    timestamp or a date (converted by ``json_field``), the declared type otherwise."""
    normal = normalize_type(declared)
    if normal in ("timestamp", "date"):
        return "string"
    return _wide_decimal(normal) or declared


@dataclass(frozen=True)
class Converted:
    """A field's value as written, and the condition under which the record is bad because of it
    (None when the parse alone decides, as for ``from_json``'s own types)."""

    value: Column
    bad: Column | None = None
    message: Column | None = None


def _text_timestamp(text: Column) -> Column:
    from pyspark.sql import functions as F

    return (F.when(text.rlike(_EPOCH_SECONDS), F.timestamp_seconds(F.trim(text).cast("long")))
            .otherwise(text.try_cast("timestamp")))


def _text_value(name: str, text: Column, target: str) -> Converted:
    """A text (a JSON field read as text, or a string field under ``lenient``) as a ``target`` value."""
    from pyspark.sql import functions as F

    normal, target = normalize_type(target), sql_name(target)
    quoted = F.concat(F.lit("'"), text, F.lit("'"))
    if normal == "timestamp":
        value = _text_timestamp(text)
        lost = text.rlike(_MORE_THAN_MICROS)
        return Converted(value, text.isNotNull() & (value.isNull() | lost), F.when(value.isNull(), F.concat(
            F.lit(f"field '{name}': "), quoted, F.lit(" is not a valid timestamp"))).otherwise(F.concat(
                F.lit(f"field '{name}': "), quoted,
                F.lit(" has more precision than a timestamp column holds (microseconds)"))))
    if normal == "date":
        value = text.try_cast("date")
        lost = F.regexp_extract(text, _TIME_OF_DAY, 1).rlike("[1-9]")
        return Converted(value, text.isNotNull() & (value.isNull() | lost), F.when(value.isNull(), F.concat(
            F.lit(f"field '{name}': "), quoted, F.lit(" is not a valid date"))).otherwise(F.concat(
                F.lit(f"field '{name}': "), quoted, F.lit(" has a time of day, which a date column cannot hold"))))
    wide = _wide_decimal(normal)
    parsed = text.try_cast(wide or target)
    converted = _exact(name, parsed, wide, target) if wide else Converted(parsed, F.lit(False))
    infinite = _infinite(converted.value) if normal in ("float", "double") else F.lit(False)
    bad = text.isNotNull() & (converted.value.isNull() | converted.bad | infinite)
    return Converted(converted.value, bad, F.when(converted.value.isNull() | infinite, F.concat(
        F.lit(f"field '{name}': "), quoted, F.lit(f" is not a valid {target}"))).otherwise(converted.message))


def _infinite(value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.abs(value) == F.lit(float("inf"))


def _exact(name: str, wide: Column, wide_type: str, target: str) -> Converted:
    """A wide decimal into the column's decimal: bad when the narrowing rounds it."""
    from pyspark.sql import functions as F

    narrow = wide.cast(target)
    shown = F.regexp_replace(F.regexp_replace(wide.cast("string"), r"(\.[0-9]*?)0+$", "$1"), r"\.$", "")
    return Converted(narrow, wide.isNotNull() & (narrow != wide), F.concat(
        F.lit(f"field '{name}': value "), shown, F.lit(f" has more decimal places than {target} holds")))


def json_field(name: str, parsed: Column, declared: str) -> Converted:
    """A JSON field (parsed with ``json_read_type``) as written to its column, and when it is bad."""
    from pyspark.sql import functions as F

    normal = normalize_type(declared)
    if json_read_type(declared) == "string" and normal != "string":
        return _text_value(name, parsed, declared)
    wide = _wide_decimal(normal)
    if wide:
        return _exact(name, parsed, wide, declared)
    if normal in ("float", "double"):
        return Converted(parsed, _infinite(parsed), F.lit(
            f"field '{name}': value is out of the range of {declared} (it would be infinity)"))
    return Converted(parsed)


def _comparable(normal: str) -> bool:
    """Whether values of a type can be compared for equality in Spark (maps cannot)."""
    return "map<" not in normal


def exact_cast(name: str, value: Column, source: str, target: str) -> Converted:
    """``value`` (of type ``source``) written into a column of type ``target``: bad when it has no value
    there (out of range, not a number) or when the written value is not the one it came from (5.5 as 5).
    A text is parsed as ``_text_value`` parses a JSON field's text."""
    from pyspark.sql import functions as F

    source_normal, target_normal = normalize_type(source), normalize_type(target)
    source, target = sql_name(source), sql_name(target)
    if source_normal == "string" and target_normal != "string":
        return _text_value(name, value, target)
    cast = value.try_cast(target)
    changed = F.lit(False)
    if _comparable(source_normal) and _comparable(target_normal):
        changed = cast.cast(source) != value
    shown = F.concat(F.lit(f"field '{name}': value "), value.cast("string"), F.lit(f" ({source})"))
    message = F.when(cast.isNull(), F.concat(shown, F.lit(f" does not fit the output column's type {target}"))
                     ).otherwise(F.concat(shown, F.lit(f" cannot be written exactly as the output column's type "
                                                       f"{target} (it would be "), cast.cast("string"), F.lit(")")))
    return Converted(cast, value.isNotNull() & (cast.isNull() | changed), message)
