"""Recovery of a pending batch (tidemark.batch.recovery): the decision from the ledger and the output's marker."""

from __future__ import annotations

import pytest

from tidemark.batch.recovery import decide_recovery


@pytest.mark.parametrize(("pending", "marker", "dead_letters_done", "expected"), [
    (None, None, True, "none"),
    (None, 4, False, "none"),
    (5, None, True, "re_execute"),
    (5, 4, True, "re_execute"),
    (5, 5, True, "roll_forward"),
    (5, 6, True, "roll_forward"),
    (5, 5, False, "re_execute"),  # in the output, its dead letters maybe not: the job completes them
    (5, None, False, "re_execute"),
])
def test_recovery_decision(pending, marker, dead_letters_done, expected):
    assert decide_recovery(pending, marker, dead_letters_done) == expected
