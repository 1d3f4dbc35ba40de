"""SQL transforms: one Spark SQL ``SELECT`` per pipeline over the batch's decoded records, run in the same
pass as the read, before the write (pure; the Spark side is ``tidemark.batch.spark.transform_sql``).

::

    transform: |
      SELECT kafka_topic, kafka_partition, kafka_offset, kafka_timestamp,
             order_id, upper(country) AS country, amount * 100 AS amount_cents
      FROM records
      WHERE NOT is_test

The rules (docs/DESIGN.md, *Transforms*):

* ``records`` holds the batch's good records (bad ones go to the dead letters untransformed), with every
  column the pipeline would write and ``kafka_date``; nothing else of the session is visible but tables
  named by path (``delta.`/lake/dims```).
* The coordinates ``kafka_topic``, ``kafka_partition`` and ``kafka_offset`` must come out of the SELECT
  unchanged: a transform that drops, computes or swaps one is refused before Kafka is read (Spark tracks
  the columns through the plan). Every row of the output is then one of a record's rows.
* ``ingest_batch_id`` and ``ingested_at`` are Tidemark's: set on every output row after the SELECT.
* The record is the unit of exactly once. A record gives 0 rows (filtered: counted in the ledger), 1, or
  several (``explode``); all of them commit in the batch's one output commit, so a coordinate is in exactly
  one batch, and a re-read (backfill, replay) of a coordinate the output holds adds nothing.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

VIEW = "records"
"""The name the transform reads the batch's records by."""
COORDINATES = ("kafka_topic", "kafka_partition", "kafka_offset")
"""The columns that must come out of a transform unchanged."""
BATCH_COLUMNS = ("ingest_batch_id", "ingested_at")
"""Set by Tidemark on every row after the transform (a transform's own are replaced)."""
MAX_LENGTH = 20_000

_CLAUSE = r"(?:WHERE|GROUP|ORDER|SORT|CLUSTER|DISTRIBUTE|HAVING|LIMIT|OFFSET|QUALIFY|WINDOW)"
_FOLLOWS = (r"(?:WHERE|GROUP|ORDER|SORT|CLUSTER|DISTRIBUTE|HAVING|LIMIT|OFFSET|QUALIFY|WINDOW|UNION|EXCEPT|INTERSECT"
            r"|MINUS|JOIN|LEFT|RIGHT|INNER|FULL|CROSS)")
_KEYWORD_ALIAS = re.compile(rf"\b(?:FROM|JOIN)\s+([\w.]+)\s+(?:AS\s+)?({_CLAUSE})\b(?!\s+BY\b)"
                            rf"(?=\s*(?:$|\)|{_FOLLOWS}\b))", re.I)
"""A clause keyword right after a table with nothing of its clause after it (``FROM records WHERE``): Spark's
parser takes the keyword as the table's alias, so the clause silently does nothing."""
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`([^`]*)`", re.S)


def _unquoted(match: re.Match) -> str:
    """A string literal as an empty one; a backtick-quoted name (`records`) as the name, with only word characters
    and dots kept (a ';' inside a quoted name is no second statement)."""
    name = match.group(1)
    return "''" if name is None else re.sub(r"[^\w.]", "_", name)


def check_sql(sql: str) -> str:
    """A pipeline file's ``transform``: one query (``SELECT`` or ``WITH``) reading ``records``. Spark checks
    the rest (syntax, columns, types) before Kafka is read. Raises ValueError; returns the text stripped."""
    text = sql.strip().rstrip(";").strip()
    bare = _QUOTED.sub(_unquoted, _COMMENTS.sub(" ", text))
    if not text:
        raise ValueError("is empty: give one SELECT over 'records', or leave transform out")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"is {len(text)} characters; at most {MAX_LENGTH} (keep long logic in a view or a UDF "
                         f"the Spark session registers)")
    if ";" in bare:
        raise ValueError("holds more than one statement (a ';' inside it): give one SELECT over 'records'")
    first = bare.split(None, 1)[0].upper() if bare.split() else ""
    if first not in ("SELECT", "WITH", "FROM"):
        raise ValueError(f"starts with '{first}': it must be one query, SELECT ... FROM records (or WITH ...)")
    if not re.search(rf"\b{VIEW}\b", bare, re.I):
        raise ValueError(f"does not read '{VIEW}' (the batch's decoded records): SELECT ... FROM {VIEW}")
    if alias := _KEYWORD_ALIAS.search(bare):
        table, keyword = alias.groups()
        raise ValueError(f"has '{keyword}' right after '{table}' with nothing of its clause after it: Spark reads "
                         f"'{keyword}' as an alias of '{table}', so the clause would do nothing (a trailing WHERE "
                         f"would write every record). Finish the clause ({keyword.upper()} ...) or remove the word")
    return text


TransformSql = Annotated[str, AfterValidator(check_sql)]
"""A pipeline file's ``transform``, checked when the file is read."""


def check_pipeline(transform: str | None, verify_sample: int = 0) -> None:
    """The ``transform`` against the rest of a pipeline file (``verify_sample``: the scheduled audit's). On a keyed
    table it is checked in the job (``batch.modes.keyed_transform``): the keys and ordering fields must come through."""
    from tidemark.config.audit_schedule import check_verify_sample

    check_verify_sample(verify_sample, transform)


def missing_coordinates(columns: dict[str, str | None]) -> list[str]:
    """The coordinates a transform's output lacks or did not carry through: ``columns`` maps each output
    column to the coordinate it carries unchanged (Spark's column metadata), or None."""
    return [c for c in COORDINATES if columns.get(c) != c]

