"""The Airflow tasks' error policy (tidemark_airflow.tasks): terminal errors fail the task at once (no
retries), transient ones are left to Airflow's retries."""

from __future__ import annotations

import pytest

from tidemark.errors import (
    BadRecordsError,
    ConfigError,
    KafkaAuthenticationError,
    KafkaUnavailableError,
    LedgerConflictError,
    PipelineBusyError,
    TopicRecreatedError,
    is_transient,
)


def raising(error: Exception):
    # Airflow is imported inside the tests: the e2e tier gives it a private home before its first import.
    from tidemark_airflow.tasks import fail_fast_on_terminal_errors

    @fail_fast_on_terminal_errors
    def task(**context):
        raise error
    return task


@pytest.mark.parametrize("error", [ConfigError("x"), TopicRecreatedError("x"), KafkaAuthenticationError("x"),
                                   PipelineBusyError.held_by("p", "run 'r'", "planning"), BadRecordsError("x")])
def test_terminal_errors_fail_the_task_without_retries(error):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=type(error).__name__):
        raising(error)()


@pytest.mark.parametrize("error", [KafkaUnavailableError("x"), LedgerConflictError("x"), OSError("disk")])
def test_transient_and_unexpected_errors_are_left_to_retries(error):
    with pytest.raises(type(error)):
        raising(error)()
    assert is_transient(error)
