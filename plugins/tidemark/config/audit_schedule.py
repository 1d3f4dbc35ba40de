"""``audit:`` of a pipeline file: the scheduled audit (the DAG ``tidemark_audit__<pipeline>``), off unless the
file has it. Each run is ``tidemark audit PIPELINE [--verify-sample N]``; damage fails the run
(``AuditDamageError``, terminal: a retry would find the same damage), so Airflow's failure alerts tell.
A pipeline with a SQL transform gets no sample (``check_verify_sample``): its output is not Kafka's values."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.value_types import Every
from tidemark.errors import TidemarkError


class AuditSchedule(BaseModel):
    """``audit: {every: 24h, verify_sample: 0}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: Every
    """How often the audit DAG runs: ``24h``, ``7d``, ... (at least 1m)."""

    verify_sample: int = Field(default=0, ge=0, strict=True)
    """Committed ranges still retained in Kafka to read again and compare by checksum at each run."""


def check_verify_sample(verify_sample: int, transform: str | None, flag: str = "audit.verify_sample") -> None:
    """Refuse a sample (``verify_sample`` > 0, given as ``flag``) of a pipeline with a ``transform``: the sample
    compares the table's values with Kafka's, and a transform's output is not Kafka's values. Raises ValueError;
    the audit without a sample still checks the counts and coordinates."""
    if verify_sample > 0 and transform is not None:
        raise ValueError(f"{flag} ({verify_sample}) cannot be used on a pipeline with a transform: the sample "
                         f"compares the table's values with Kafka's, and the transform's output is not Kafka's "
                         f"values. Leave {flag} out: the audit still checks the counts and the coordinates (every "
                         f"committed offset in the output, the dead letters or filtered, in exactly one batch)")


class AuditDamageError(TidemarkError):
    """The scheduled audit found damage (its message is the audit's verdict; the task log lists it)."""
