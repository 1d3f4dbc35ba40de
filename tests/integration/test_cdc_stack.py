"""The change data capture stack (scripts/cdc.sh, tests/cdc.py): a real Debezium PostgreSQL connector in Kafka
Connect (standalone), pgoutput on a private PostgreSQL with wal_level=logical, writing JSON without the
converter's schema wrapper (CDC_SCHEMAS_ENABLE=false) to the session's broker."""

from __future__ import annotations

from tests.cdc import Debezium


def test_debezium_streams_inserts_updates_deletes_and_tombstones(debezium: Debezium) -> None:
    table = debezium.unique_table("customers")
    topic = debezium.create_table(table, "id int PRIMARY KEY, name text, updated_at timestamptz")
    assert topic == f"{debezium.prefix}.public.{table}"
    # One transaction per statement: each change has its own commit LSN.
    debezium.sql(f"INSERT INTO {table} VALUES (1, 'ada', '2024-05-01 10:00:00.123456+00'),"
                 f" (2, 'bob', '2024-05-01 10:00:01+00')")
    debezium.sql(f"UPDATE {table} SET name = 'ada l', updated_at = '2024-05-02 09:30:00+02' WHERE id = 1")
    debezium.sql(f"DELETE FROM {table} WHERE id = 2")

    changes = debezium.read(topic, 5)

    assert [(c.key, c.op) for c in changes] == [
        ({"id": 1}, "c"), ({"id": 2}, "c"), ({"id": 1}, "u"), ({"id": 2}, "d"), ({"id": 2}, None)]
    c1, c2, u1, d2, tombstone = changes
    assert tombstone.value is None  # tombstones.on.delete=true: the key with a null value, after the delete
    # schemas.enable=false: the bare envelope; timestamptz as ZonedTimestamp (ISO-8601 in UTC, 6 digits)
    assert set(c1.value) >= {"before", "after", "source", "op", "ts_ms"} and "payload" not in c1.value
    assert c1.value["before"] is None
    assert c1.value["after"] == {"id": 1, "name": "ada", "updated_at": "2024-05-01T10:00:00.123456Z"}
    assert c2.value["after"] == {"id": 2, "name": "bob", "updated_at": "2024-05-01T10:00:01.000000Z"}
    # The default replica identity (the primary key): no before image of an update, the key only in a delete's
    assert u1.value["before"] is None
    assert u1.value["after"] == {"id": 1, "name": "ada l", "updated_at": "2024-05-02T07:30:00.000000Z"}
    assert d2.value["before"] == {"id": 2, "name": None, "updated_at": None} and d2.value["after"] is None

    sources = [c.value["source"] for c in (c1, c2, u1, d2)]
    for source in sources:
        assert source["connector"] == "postgresql" and source["version"] == "3.6.1.Final"
        assert (source["db"], source["schema"], source["table"]) == ("shop", "public", table)
        assert source["snapshot"] == "false"
        assert isinstance(source["lsn"], int) and source["lsn"] > 0
        assert isinstance(source["ts_ms"], int) and source["ts_ms"] > 0
    lsns = [s["lsn"] for s in sources]
    assert lsns == sorted(lsns) and len(set(lsns)) == 4, lsns  # the WAL order of the changes
    assert [s["txId"] for s in sources][:2] == [sources[0]["txId"]] * 2  # one INSERT, one transaction
    assert len({s["txId"] for s in sources}) == 3
