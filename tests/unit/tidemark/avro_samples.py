"""Value schemas of an ``Order`` record in three versions, shared by the schema and registry-client tests."""

from __future__ import annotations


def record(*fields: dict) -> dict:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)}


ORDER_ID, AMOUNT = {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}
V1 = record(ORDER_ID, AMOUNT)
V2 = record(ORDER_ID, AMOUNT, {"name": "region", "type": ["null", "string"], "default": None})
V3_NO_DEFAULT = record(ORDER_ID, AMOUNT, {"name": "country", "type": "string"})


def debezium_envelope(*row: dict, table: str = "shop.public.customers", position: str = "lsn",
                      position_type: object = ("null", "long")) -> dict:
    """A Debezium change event's value schema as Kafka Connect's AvroConverter writes it (the shape of what the
    PostgreSQL connector registers, trimmed): the row ``Value`` defined in ``before`` and named again in
    ``after``; ``source`` in Debezium's own namespace, with ``position`` (``lsn``, MySQL's ``pos``, or None)."""
    kind = list(position_type) if isinstance(position_type, tuple) else position_type
    source = [{"name": "version", "type": "string"}, {"name": "ts_ms", "type": "long"},
              {"name": "snapshot", "type": [{"type": "string", "connect.name": "io.debezium.data.Enum"}, "null"],
               "default": "false"},
              *([{"name": position, "type": kind, **({"default": None} if isinstance(kind, list) else {})}]
                if position else [])]
    value = {"type": "record", "name": "Value", "fields": list(row), "connect.name": f"{table}.Value"}
    return {"type": "record", "name": "Envelope", "namespace": table, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": source}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}], "connect.name": f"{table}.Envelope"}
