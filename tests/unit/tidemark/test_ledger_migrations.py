"""The ledger's schema versions and migration chain, as logic: version detection, the chain, refusal of
newer versions, and the migrate loop against a stand-in table (the real Delta tables are in
tests/integration/test_ledger_migration.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from tidemark.errors import ConfigError
from tidemark.ledger import migrations as m
from tidemark.ledger.store import SCHEMA

# --- version detection ---------------------------------------------------------------------------


def test_a_ledger_without_the_property_is_version_1():
    assert m.version_of({}) == m.UNVERSIONED == 1
    assert m.version_of({"delta.appendOnly": "false"}) == 1


def test_the_property_holds_the_version():
    assert m.version_of({m.VERSION_PROPERTY: "2"}) == 2
    assert m.version_of({m.VERSION_PROPERTY: "99"}) == 99


def test_a_new_ledger_starts_at_the_current_version():
    assert m.new_table_configuration() == {"tidemark.ledger.schemaVersion": "6"}
    assert m.version_of(m.new_table_configuration()) == m.CURRENT_VERSION == 6


@pytest.mark.parametrize("raw", ["two", "", "0", "-1", "2.0"])
def test_a_property_that_is_not_a_version_is_refused(raw):
    with pytest.raises(m.LedgerVersionError, match=r"tidemark\.ledger\.schemaVersion=.*not a schema version"):
        m.version_of({m.VERSION_PROPERTY: raw}, "file:///lake/_tidemark/offsets")


# --- refusal of newer versions ---------------------------------------------------------------------


def test_a_newer_version_is_refused_with_what_to_do():
    with pytest.raises(m.LedgerVersionError) as refused:
        m.check_supported(99, "file:///lake/_tidemark/offsets")
    message = str(refused.value)
    assert "file:///lake/_tidemark/offsets has schema version 99" in message
    assert f"supports schema versions up to {m.CURRENT_VERSION}" in message
    assert "Upgrade Tidemark" in message and "Nothing was read or written" in message
    assert isinstance(refused.value, ConfigError) and not refused.value.transient  # terminal


def test_the_current_and_older_versions_are_supported():
    m.check_supported(6)
    m.check_supported(5)
    m.check_supported(4)
    m.check_supported(3)
    m.check_supported(2)
    m.check_supported(1)
    with pytest.raises(m.LedgerVersionError):
        m.check_supported(7)


# --- the chain -----------------------------------------------------------------------------------


def noop(table) -> None:
    pass


def chain(*pairs: tuple[int, int]) -> list[m.Migration]:
    return [m.Migration(a, b, noop) for a, b in pairs]


def test_the_shipped_chain_leads_from_version_1_to_the_current_one():
    m.validate_chain(m.MIGRATIONS)
    assert [(s.from_version, s.to_version) for s in m.MIGRATIONS] == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]


@pytest.mark.parametrize(("pairs", "current"), [
    ([], 2),                        # nothing leads to 2
    ([(1, 3)], 3),                  # skips a version
    ([(2, 3), (1, 2)], 3),          # out of order
    ([(1, 2), (2, 3), (3, 4)], 2),  # beyond the current version
    ([(1, 2)], 3),                  # stops short of it
])
def test_a_broken_chain_is_a_programming_error(pairs, current):
    with pytest.raises(ValueError, match="migration chain"):
        m.validate_chain(chain(*pairs), current)


def test_pending_steps_are_the_rest_of_the_chain_in_order():
    three = chain((1, 2), (2, 3), (3, 4))
    assert m.pending_steps(1, three, current=4) == three
    assert m.pending_steps(2, three, current=4) == three[1:]
    assert m.pending_steps(4, three, current=4) == []
    assert m.pending_steps(1) == m.MIGRATIONS
    assert m.pending_steps(2) == m.MIGRATIONS[1:]
    assert m.pending_steps(3) == m.MIGRATIONS[2:]
    assert m.pending_steps(4) == m.MIGRATIONS[3:]
    assert m.pending_steps(5) == m.MIGRATIONS[4:]
    assert m.pending_steps(6) == []
    with pytest.raises(m.LedgerVersionError, match="schema version 5"):
        m.pending_steps(5, three, current=4)


def test_the_current_versions_columns_are_the_ledger_schema():
    """A column added to (or renamed in) ledger.SCHEMA is a new schema version: freeze its columns, add a
    migration step and raise CURRENT_VERSION (see ledger_migrations)."""
    assert m.CURRENT_VERSION == 6
    assert tuple(SCHEMA.names) == m.V6_COLUMNS
    assert m.V6_COLUMNS == (*m.V5_COLUMNS, *(f.name for f in m.V6_ADDED))
    assert m.V5_COLUMNS == (*m.V4_COLUMNS, *(f.name for f in m.V5_ADDED))
    assert m.V4_COLUMNS == (*m.V3_COLUMNS, *(f.name for f in m.V4_ADDED))
    assert m.V3_COLUMNS == (*m.V2_COLUMNS, *(f.name for f in m.V3_ADDED))


@pytest.mark.parametrize("added", [*m.V1_OPTIONAL, *m.V3_ADDED, *m.V4_ADDED, *m.V5_ADDED, *m.V6_ADDED],
                         ids=lambda f: f.name)
def test_the_columns_a_migration_adds_are_nullable_ledger_columns(added):
    """Old rows read null in them, so each must be nullable, with the ledger's own type."""
    assert added.nullable and SCHEMA.field(added.name).type == added.type and SCHEMA.field(added.name).nullable


def test_missing_columns():
    fields = [pa.field("a", pa.int64()), pa.field("b", pa.string()), pa.field("c", pa.string())]
    assert [f.name for f in m.missing_columns({"a"}, fields)] == ["b", "c"]
    assert m.missing_columns({"a", "b", "c", "d"}, fields) == []


# --- the migrate loop against a stand-in table -----------------------------------------------------


@dataclass
class FakeTable:
    """Just what migrate() uses of a DeltaTable: the configuration of the snapshot it holds, property
    commits, and a refresh. ``shared`` is the table's latest configuration (what a refresh sees);
    ``conflicts`` commits fail with CommitFailedError, as when another process committed first."""

    shared: dict[str, str]
    conflicts: int = 0
    table_uri: str = "file:///lake/_tidemark/offsets"
    commits: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.snapshot = dict(self.shared)
        self.alter = self

    def metadata(self):
        return type("Metadata", (), {"configuration": dict(self.snapshot)})()

    def set_table_properties(self, properties: dict[str, str], raise_if_not_exists: bool = True) -> None:
        from deltalake.exceptions import CommitFailedError

        assert raise_if_not_exists is False  # delta-rs refuses properties it does not know otherwise
        if self.conflicts:
            self.conflicts -= 1
            raise CommitFailedError("Failed to commit transaction: Metadata changed since last commit.")
        self.snapshot.update(properties)
        self.shared.update(properties)
        self.commits.append(dict(properties))

    def update_incremental(self) -> None:
        self.snapshot = dict(self.shared)


def recording(log: list[str], name: str):
    def apply(table) -> None:
        log.append(f"{name}@{m.schema_version(table)}")
    return apply


def test_migrate_applies_each_step_then_records_its_version():
    applied: list[str] = []
    steps = [m.Migration(1, 2, recording(applied, "a")), m.Migration(2, 3, recording(applied, "b"))]
    table = FakeTable({})
    assert m.migrate(table, steps, current=3) is table
    assert applied == ["a@1", "b@2"]
    assert table.commits == [{m.VERSION_PROPERTY: "2"}, {m.VERSION_PROPERTY: "3"}]


def test_migrate_continues_from_the_version_it_finds():
    applied: list[str] = []
    steps = [m.Migration(1, 2, recording(applied, "a")), m.Migration(2, 3, recording(applied, "b"))]
    table = FakeTable({m.VERSION_PROPERTY: "2"})
    m.migrate(table, steps, current=3)
    assert applied == ["b@2"] and table.commits == [{m.VERSION_PROPERTY: "3"}]


def test_migrating_a_current_table_commits_nothing():
    applied: list[str] = []
    table = FakeTable({m.VERSION_PROPERTY: "2"})
    m.migrate(table, [m.Migration(1, 2, recording(applied, "a"))], current=2)
    assert applied == [] and table.commits == []


def test_a_migrator_that_loses_the_race_rereads_and_finds_the_work_done():
    applied: list[str] = []
    table = FakeTable({}, conflicts=1)
    table.shared[m.VERSION_PROPERTY] = "2"  # another process migrated after this one read the table
    m.migrate(table, [m.Migration(1, 2, recording(applied, "a"))], current=2)
    assert applied == ["a@1"]  # tried once, lost the commit, re-read: version 2, nothing more to do
    assert table.commits == [] and m.schema_version(table) == 2


def test_a_migrator_that_keeps_losing_gives_up_with_a_conflict():
    from tidemark.errors import LedgerConflictError

    table = FakeTable({}, conflicts=10_000)
    with pytest.raises(LedgerConflictError, match="too busy to migrate"):
        m.migrate(table, [m.Migration(1, 2, noop)], current=2)


def test_a_newer_table_is_refused_before_any_step_runs():
    applied: list[str] = []
    table = FakeTable({m.VERSION_PROPERTY: "99"})
    with pytest.raises(m.LedgerVersionError, match="schema version 99"):
        m.migrate(table, [m.Migration(1, 2, recording(applied, "a"))], current=2)
    assert applied == [] and table.commits == []
