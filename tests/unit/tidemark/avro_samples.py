"""Value schemas of an ``Order`` record in three versions, shared by the schema and registry-client tests."""

from __future__ import annotations


def record(*fields: dict) -> dict:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)}


ORDER_ID, AMOUNT = {"name": "order_id", "type": "long"}, {"name": "amount", "type": "double"}
V1 = record(ORDER_ID, AMOUNT)
V2 = record(ORDER_ID, AMOUNT, {"name": "region", "type": ["null", "string"], "default": None})
V3_NO_DEFAULT = record(ORDER_ID, AMOUNT, {"name": "country", "type": "string"})
