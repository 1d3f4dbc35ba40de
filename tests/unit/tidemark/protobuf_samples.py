"""Protobuf schemas shared by the Protobuf unit tests, and a fake registry that answers with them."""

from __future__ import annotations

from tidemark.formats.schema_registry import RegisteredSchema

ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  message Item { string sku = 1; int32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; }
  int64 order_id = 1;
  double amount = 2;
  Item first_item = 3;
  repeated Item items = 4;
  repeated string tags = 5;
  map<string, int64> counts = 6;
  Status status = 7;
  google.protobuf.Timestamp placed_at = 8;
  google.protobuf.StringValue note = 9;
  oneof payment { string card = 10; string iban = 11; }
  optional int32 maybe = 12;
  uint32 small = 13;
  uint64 big = 14;
  float ratio = 15;
  bytes blob = 16;
  bool flag = 17;
}
message Refund { int64 order_id = 1; }
"""

ORDER_V2 = ORDER.replace("  bool flag = 17;\n", "  bool flag = 17;\n  string region = 18;\n")

ORDER_COLUMNS = {
    "order_id": "bigint", "amount": "double", "first_item": "struct<`sku`:string,`qty`:int>",
    "items": "array<struct<`sku`:string,`qty`:int>>", "tags": "array<string>", "counts": "map<string,bigint>",
    "status": "string", "placed_at": "timestamp", "note": "string", "card": "string", "iban": "string",
    "maybe": "int", "small": "bigint", "big": "decimal(20,0)", "ratio": "float", "blob": "binary", "flag": "boolean"}


def registered(version: int, schema_id: int, text: str, schema_type: str = "PROTOBUF", subject: str = "orders-value",
               references: tuple = ()) -> RegisteredSchema:
    return RegisteredSchema(subject, version, schema_id, text, schema_type, references)


class FakeSource:
    """A SchemaSource: the versions of each subject (``orders-value`` by default), and what it was asked."""

    def __init__(self, *schemas: RegisteredSchema) -> None:
        self.schemas = list(schemas)
        self.asked: list[str] = []

    def versions(self, subject: str) -> list[RegisteredSchema]:
        self.asked.append(subject)
        return [s for s in self.schemas if s.subject == subject]
