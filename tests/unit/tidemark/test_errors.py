"""Tidemark's errors (tidemark.errors): messages that name what happened and what to do."""

from __future__ import annotations

from tidemark.errors import PipelineBusyError


def test_the_busy_message_names_the_holder_and_what_to_do():
    message = str(PipelineBusyError.held_by("orders", "run 'scheduled__1' froze batch 7", "planning"))
    assert message.startswith("pipeline 'orders': another run holds the pipeline: run 'scheduled__1' froze batch 7.")
    assert "wrote nothing" in message and "max_active_runs=1" in message
