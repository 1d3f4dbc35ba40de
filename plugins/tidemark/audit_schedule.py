"""``audit:`` of a pipeline file: the scheduled audit (the DAG ``tidemark_audit__<pipeline>``), off unless the
file has it. Each run is ``tidemark audit PIPELINE [--verify-sample N]``; damage fails the run
(``AuditDamageError``, terminal: a retry would find the same damage), so Airflow's failure alerts tell."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config_types import Every
from tidemark.errors import TidemarkError


class AuditSchedule(BaseModel):
    """``audit: {every: 24h, verify_sample: 0}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: Every
    """How often the audit DAG runs: ``24h``, ``7d``, ... (at least 1m)."""

    verify_sample: int = Field(default=0, ge=0, strict=True)
    """Committed ranges still retained in Kafka to read again and compare by checksum at each run."""


class AuditDamageError(TidemarkError):
    """The scheduled audit found damage (its message is the audit's verdict; the task log lists it)."""
