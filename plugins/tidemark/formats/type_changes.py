"""Which column type changes keep every value exactly (pure, no JVM).

A field whose type changed is compared with its output column's type:

* a **widening** (``is_widening``) holds every value of the old type exactly in the new one, so the
  column's type can change in place and old rows read back with the new type. The set is Delta Lake's
  own (``TypeWidening.isTypeChangeSupported`` in delta-spark 4.x): integers to a wider integer,
  ``float`` to ``double``, ``tinyint``/``smallint``/``int`` to ``double``, integers to a decimal with
  room for all their digits (``decimal(10,0)`` and wider for ``int``, ``decimal(20,0)`` for ``bigint``),
  a decimal to one with at least as many digits on each side of the point, and ``date`` to
  ``timestamp_ntz``;
* anything else, narrowing included, is not; ``bigint`` to ``double`` is not either (a double holds
  integers exactly only up to 2**53), and ``widening_hint`` says what to declare instead.
"""

from __future__ import annotations

import re

_SYNONYMS = [(r"\bbigint\b", "long"), (r"\bint\b", "integer"), (r"\bsmallint\b", "short"),
             (r"\btinyint\b", "byte"), (r"\breal\b", "float")]
_INTEGERS = {"byte": 3, "short": 5, "integer": 10, "long": 19}
"""An integer type -> the decimal digits its values can have (so the decimal(p,0) that holds them all)."""
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


def normalize_type(ddl: str) -> str:
    """One spelling per Spark SQL type, to compare a schema's type with a Delta column's:
    ``bigint`` and ``long`` are the same type, so are ``int`` and ``integer``."""
    text = re.sub(r"[\s`]", "", ddl.lower())
    for pattern, name in _SYNONYMS:
        text = re.sub(pattern, name, text)
    return text


_SQL_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def sql_name(ddl: str) -> str:
    """A type as Spark SQL spells it in DDL (``bigint``, not the Delta log's ``long``), for messages."""
    normal = normalize_type(ddl)
    return _SQL_NAMES.get(normal, normal)


def _decimal(normal: str) -> tuple[int, int] | None:
    match = _DECIMAL.match(normal)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _digits(normal: str) -> tuple[int, int] | None:
    """(digits left of the point, digits right of it) a type's values can have: an integer type's
    or a decimal's; None for any other type."""
    if normal in _INTEGERS:
        return _INTEGERS[normal], 0
    decimal = _decimal(normal)
    return (decimal[0] - decimal[1], decimal[1]) if decimal else None


def is_widening(old: str, new: str) -> bool:
    """Whether every value of type ``old`` is a value of type ``new``, exactly, in a change Delta Lake
    supports (the module's list). Types in any Spark spelling; a type that is the same is no widening."""
    old, new = normalize_type(old), normalize_type(new)
    if old == new:
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS[old] < _INTEGERS[new]
    if (old, new) in {("float", "double"), ("date", "timestamp_ntz")}:
        return True
    if new == "double":
        return old in ("byte", "short", "integer")
    before, after = _digits(old), _digits(new)
    if before is None or after is None or _decimal(new) is None:
        return False
    if old in _INTEGERS:  # Delta's minimum targets: decimal(10,0) for int and narrower, decimal(20,0) for bigint
        before = (20 if old == "long" else 10, 0)
    return after[0] >= before[0] and after[1] >= before[1]


def widening_hint(old: str, new: str) -> str | None:
    """What to declare instead when a change is close to a widening but is not one, or None."""
    old, new = normalize_type(old), normalize_type(new)
    if old == "long" and new in ("double", "float"):
        return ("a bigint does not widen to a floating-point type: a double holds integers exactly only up to "
                "2**53. Declare the field decimal(p,s) with p - s >= 20 (for example decimal(22,2) for two "
                "decimal places), which widens the column in place")
    if old in _INTEGERS and _decimal(new) is not None:
        least = 20 if old == "long" else 10
        return (f"a {old} widens only to a decimal with at least {least} digits before the point "
                f"(decimal({least + 2},2) for two decimal places)")
    if _decimal(old) is not None and _decimal(new) is not None:
        return ("a decimal widens only to one with at least as many digits before the point and after it: "
                "raise the precision by at least as much as the scale")
    return None
