"""Which type changes widen a column in place (the set delta-spark 4.x's type widening supports) and
which are refused because a value could change."""

from __future__ import annotations

import pytest

from tidemark.formats.type_changes import is_widening, widening_hint

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("old", "new"), [
    ("tinyint", "smallint"), ("smallint", "int"), ("int", "bigint"), ("integer", "long"), ("tinyint", "bigint"),
    ("float", "double"), ("int", "double"), ("smallint", "double"),
    ("int", "decimal(10,0)"), ("int", "decimal(12,2)"), ("bigint", "decimal(20,0)"), ("long", "decimal(22,2)"),
    ("decimal(10,2)", "decimal(12,2)"), ("decimal(10,2)", "decimal(12,4)"), ("decimal(10,2)", "decimal(11,2)"),
    ("date", "timestamp_ntz"),
])
def test_widenings_keep_every_value(old, new):
    assert is_widening(old, new)


@pytest.mark.parametrize(("old", "new"), [
    ("bigint", "int"), ("double", "float"), ("double", "bigint"),  # narrowing
    ("bigint", "double"), ("bigint", "float"), ("int", "float"),  # a float or double loses large integers
    ("int", "decimal(9,0)"), ("bigint", "decimal(19,0)"), ("int", "decimal(10,2)"),  # too few digits
    ("decimal(10,2)", "decimal(10,3)"), ("decimal(10,2)", "decimal(12,1)"), ("decimal(10,2)", "bigint"),
    ("bigint", "bigint"), ("long", "bigint"),  # no change at all
    ("string", "bigint"), ("bigint", "string"), ("timestamp", "date"), ("date", "timestamp"),
])
def test_other_changes_are_no_widening(old, new):
    assert not is_widening(old, new)


def test_the_hint_says_what_to_declare_instead():
    assert "decimal(22,2)" in widening_hint("bigint", "double")
    assert "at least 20 digits before the point" in widening_hint("bigint", "decimal(19,2)")
    assert "at least 10 digits before the point" in widening_hint("int", "decimal(10,2)")
    assert "raise the precision by at least as much as the scale" in widening_hint("decimal(10,2)", "decimal(10,3)")
    assert widening_hint("string", "bigint") is None
