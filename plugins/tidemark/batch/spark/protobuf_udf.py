"""Protobuf values decoded in Spark (``value_format: protobuf``): one Arrow UDF over the value column that runs
``tidemark.formats.protobuf_decode.Decoder`` with the batch's frozen schemas in Spark's Python workers, giving per
record a struct of the reader message's fields (``row``) and why the record is bad (``error``, null for a good one).

Why a Python UDF and not Spark's ``from_protobuf``: ``from_protobuf`` lives in the ``spark-protobuf`` jar, which
Maven Central as reachable here does not serve (no version of ``spark-protobuf_2.13``); without it
Spark 4.2 refuses the function (``PROTOBUF_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE``). The protobuf runtime (upb) parses
in C; the rows come back to the JVM as Arrow. Executors import the core as they do for every job (``--py-files``)
and need ``protobuf`` and ``pyarrow`` installed, as the driver does.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

from tidemark.formats.protobuf_types import Array, Leaf, Map, Shape, Struct

if TYPE_CHECKING:
    from pyspark.sql import Column

    from tidemark.formats.protobuf_schemas import FrozenProtobuf

_LEAVES = {"int": "int32", "bigint": "int64", "float": "float32", "double": "float64", "boolean": "bool_",
           "string": "string", "binary": "binary"}
_DECODERS: dict[str, tuple] = {}
"""The decoder and Arrow type of each frozen-schemas JSON, per Python worker (built at its first batch)."""


def arrow_type(shape: Shape):
    """The Arrow type Spark reads as the shape's Spark type (``tidemark.formats.protobuf_types.ddl``)."""
    import pyarrow as pa

    if isinstance(shape, Leaf):
        if shape.spark == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if shape.spark.startswith("decimal("):
            precision, scale = shape.spark[8:-1].split(",")
            return pa.decimal128(int(precision), int(scale))
        return getattr(pa, _LEAVES[shape.spark])()
    if isinstance(shape, Array):
        return pa.list_(arrow_type(shape.element))
    if isinstance(shape, Map):
        return pa.map_(arrow_type(shape.key), arrow_type(shape.value))
    assert isinstance(shape, Struct)
    return pa.struct([pa.field(name, arrow_type(s)) for name, s in shape.fields])


def decode_values(frozen_json: str, values):
    """The UDF's body, in a Python worker: an Arrow array of values -> an Arrow array of ``{row, error}``."""
    import pyarrow as pa

    from tidemark.formats.protobuf_decode import Decoder

    entry = _DECODERS.get(frozen_json)
    if entry is None:
        decoder = Decoder(json.loads(frozen_json))
        kind = pa.struct([pa.field("row", arrow_type(decoder.shape)), pa.field("error", pa.string())])
        entry = _DECODERS[frozen_json] = (decoder, kind)
    decoder, kind = entry
    decoded = []
    for value in values.to_pylist():
        row, error = decoder.decode(value)
        decoded.append({"row": row, "error": error})
    return pa.array(decoded, type=kind)


def decoded(frozen: FrozenProtobuf, column: str = "value") -> Column:
    """The ``{row, error}`` struct of each record's value (the reader message's fields, and why it is bad)."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf

    row = ",".join(f"`{f.name}`:{f.type}" for f in frozen.fields())
    decode = arrow_udf(functools.partial(decode_values, json.dumps(frozen.to_dict(), sort_keys=True)),
                       f"struct<row:struct<{row}>,error:string>")
    return decode(F.col(column))
