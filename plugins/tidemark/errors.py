"""Domain errors. Each says what went wrong, where (pipeline, topic, partition, offsets) and
what to do, and whether a retry can help (``transient``)."""

from __future__ import annotations


class TidemarkError(Exception):
    """Base class. ``transient`` tells the caller whether retrying the same step may succeed."""

    transient = False

    def __init__(self, message: str, *, pipeline: str | None = None) -> None:
        self.pipeline = pipeline
        prefix = f"pipeline '{pipeline}': " if pipeline else ""
        super().__init__(prefix + message)


class ConfigError(TidemarkError):
    """A pipeline file or a setting is invalid. Terminal: fix the file."""


class KafkaUnavailableError(TidemarkError):
    """Kafka did not answer in time. Transient: Airflow retries the task."""

    transient = True


class UnknownTopicError(TidemarkError):
    """A configured topic does not exist on the cluster. Terminal."""


class LedgerConflictError(TidemarkError):
    """Another run of the same pipeline changed the ledger first. Terminal for this run."""


class PipelineBusyError(LedgerConflictError):
    """Another run of the same pipeline holds it (planned or is executing a batch). Terminal for
    this run, which wrote nothing."""


class PlanMismatchError(TidemarkError):
    """The plan handed to a step does not match the frozen plan in the ledger. Terminal."""


class ReconciliationError(TidemarkError):
    """The records written do not add up to the records read. Terminal: nothing is committed."""


class BadRecordsError(TidemarkError):
    """Bad records in a batch under ``on_bad_record: fail``. Terminal: nothing was written."""


class KafkaAuthenticationError(TidemarkError):
    """Kafka refused the credentials of the Kafka connection (SASL authentication failed).
    Terminal: retrying with the same credentials cannot help. The message never holds them."""
