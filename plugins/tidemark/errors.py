"""Every domain error of Tidemark, in one place.

Each error says what went wrong, where (pipeline, topic, partition, offsets) and what to do, and
whether a retry can help:

* ``transient = True``: the same step may succeed if retried (Kafka did not answer in time, the
  ledger was too busy). The Airflow tasks let Airflow retry these.
* ``transient = False`` (terminal): retrying the same step with the same input fails the same way
  (a broken pipeline file, a recreated topic, refused credentials, another run holding the
  pipeline). The Airflow tasks fail at once, without retries; the message says how to fix it.
"""

from __future__ import annotations

from enum import IntEnum


class JobExit(IntEnum):
    """How the ingest job ends, shared by the job (``tidemark_spark.ingest_job``) and its launchers (the
    Airflow operator, ``tidemark run``, the benchmark): spark-submit and the warm path pass it on."""

    OK = 0
    RETRYABLE = 1
    """Any failure a retry may fix (Python's own exit code for an uncaught exception)."""
    TERMINAL = 3
    """A terminal Tidemark error: the launcher fails at once, without retries."""


class TidemarkError(Exception):
    """Base class. ``transient`` tells the caller whether retrying the same step may succeed. The
    fields (pipeline, batch id, step, topic, partition, location) are kept beside the message, for
    callers that act on them and for structured logs (``fields``)."""

    transient = False

    def __init__(self, message: str, *, pipeline: str | None = None, batch_id: int | None = None,
                 step: str | None = None, topic: str | None = None, partition: int | None = None,
                 location: str | None = None) -> None:
        self.pipeline, self.batch_id, self.step = pipeline, batch_id, step
        self.topic, self.partition, self.location = topic, partition, location
        self.detail = message
        prefix = f"pipeline '{pipeline}': " if pipeline else ""
        super().__init__(prefix + message)

    @property
    def fields(self) -> dict[str, object]:
        """The error's known coordinates (those that are set), with its kind and whether it is transient."""
        known = {"pipeline": self.pipeline, "batch_id": self.batch_id, "step": self.step, "topic": self.topic,
                 "partition": self.partition, "location": self.location}
        return {"error": type(self).__name__, "transient": self.transient,
                **{k: v for k, v in known.items() if v is not None}}

    def with_fields(self, **fields) -> TidemarkError:
        """The same error with more coordinates filled in (those already set are kept)."""
        for name, value in fields.items():
            if getattr(self, name, None) is None:
                setattr(self, name, value)
        return self


def is_transient(error: BaseException) -> bool:
    """Whether retrying the step that raised ``error`` may help. Errors that are not Tidemark's
    own (a bug, a JVM crash, an I/O error) count as transient: the retry is Airflow's to make."""
    return getattr(error, "transient", True) if isinstance(error, TidemarkError) else True


# --- configuration and input ------------------------------------------------------------------

class ConfigError(TidemarkError):
    """A pipeline file, a setting, a connection or a form value is invalid. Terminal: fix it."""


class ResetError(ConfigError):
    """An offset reset request is invalid (scope, target, missing reason). Terminal."""


class LedgerVersionError(ConfigError):
    """The ledger table was written by a newer Tidemark than this one. Terminal: upgrade."""


# --- Kafka ------------------------------------------------------------------------------------

class KafkaUnavailableError(TidemarkError):
    """Kafka did not answer in time. Transient: Airflow retries the task."""

    transient = True


class KafkaAuthenticationError(TidemarkError):
    """Kafka refused the credentials of the Kafka connection (SASL authentication failed).
    Terminal: retrying with the same credentials cannot help (and repeated failed logins can lock
    an account). The message never holds the credentials."""


class UnknownTopicError(TidemarkError):
    """A configured topic does not exist on the cluster. Terminal."""


class DataLossError(TidemarkError):
    """The committed offset is below the earliest offset Kafka still has (retention deleted
    records before they were read), under ``on_data_loss: fail``. Terminal: reset or skip."""


class OffsetsWentBackwardsError(TidemarkError):
    """Kafka's latest offset is below the committed one: the topic was deleted and recreated,
    or truncated. Terminal: an audited reset is the way out."""


class TopicRecreatedError(OffsetsWentBackwardsError):
    """A topic's Kafka topic id differs from the one the ledger recorded: it was deleted and
    recreated, so its offsets number other records. Terminal: an audited reset is the way out."""


# --- the batch protocol -----------------------------------------------------------------------

class LedgerConflictError(TidemarkError):
    """The ledger was too busy to take this run's commit (other pipelines kept committing first).
    Transient: nothing was written, and a retry re-reads the ledger."""

    transient = True


class ConcurrentBatchWriteError(TidemarkError):
    """Another writer committed the same batch to the table while this one wrote it (Delta refused
    the second commit by the batch's marker): a stale driver, or on Spark Connect a killed job's
    last write that the server finished. Transient: nothing was committed twice; the next run finds
    the batch in the table and rolls it forward."""

    transient = True


class PipelineBusyError(TidemarkError):
    """Another run of the same pipeline holds it (it froze a batch, or changed the ledger first).
    Terminal for this run, which wrote nothing."""

    @classmethod
    def held_by(cls, pipeline: str, holder: str, what: str) -> PipelineBusyError:
        """The one wording of "another run holds the pipeline": who holds it (``holder``: a run
        id, or a description), what this run was doing (``what``), and what to do."""
        return cls(f"another run holds the pipeline: {holder}. This run wrote nothing ({what}). Only one run of a "
                   f"pipeline may work at a time (the DAG's max_active_runs=1 keeps scheduled runs apart); "
                   f"retry once the other run has finished.", pipeline=pipeline)

    @classmethod
    def pending_batch(cls, pipeline: str, owner: str | None, batch_id: int, what: str) -> PipelineBusyError:
        """The pipeline is held by a batch another run froze and has not committed."""
        return cls.held_by(pipeline, f"run '{owner}' froze batch {batch_id}, which is planned but not committed", what)


class OwnerStateUnknownError(TidemarkError):
    """The orchestrator could not say whether the run that owns the pending batch is still running (its
    API failed). Transient: the batch stays with its owner, and a retry asks again."""

    transient = True


class LedgerMissingError(ConfigError):
    """The output table holds batches of the pipeline (its Delta commits carry Tidemark's marker) but
    the ledger has no row of it: the lake root moved without the ledger, or the ledger was deleted.
    Terminal: starting again from ``starting_offsets`` would ingest every record a second time."""


class PlanMismatchError(TidemarkError):
    """The plan handed to a step does not match the frozen plan in the ledger. Terminal."""


class ReconciliationError(TidemarkError):
    """The records written do not add up to the records read. Terminal: nothing is committed."""


class BadRecordsError(TidemarkError):
    """Bad records in a batch under ``on_bad_record: fail``. Terminal: nothing was written."""


class KeyOrderingError(TidemarkError):
    """A keyed table ordered by Kafka position met a key on two partitions, whose changes that ordering
    cannot order. Terminal: nothing was written; name a field to order by (``keyed.order_by``)."""


# --- schemas ----------------------------------------------------------------------------------

class SchemaRegistryUnavailableError(TidemarkError):
    """The Schema Registry did not answer in time (or answered with a server error) while a batch
    was planned. Transient: nothing was frozen; Airflow retries the plan task. A batch already
    frozen never needs the registry again: its schemas are in the ledger."""

    transient = True


class SchemaRegistryError(ConfigError):
    """The Schema Registry refused the request (credentials, an unknown subject or version) or
    holds a schema Tidemark cannot use. Terminal: fix the connection, the subject or the schema."""


class TransformError(ConfigError):
    """A pipeline's SQL transform cannot run: it does not parse or resolve, it drops or computes a record's
    coordinates, its output does not fit the table, or a record fails it (an ANSI cast). Terminal: nothing
    was written; fix the transform (``try_cast`` and friends for data that may be bad)."""


class SchemaChangeError(ConfigError):
    """The pipeline's value schema removes or retypes a column the output table already has, and
    ``schema_changes`` is ``additive``. Terminal, checked at plan time: nothing was frozen."""


# --- object storage -------------------------------------------------------------------------

class StorageLocationError(ConfigError):
    """A table's location cannot be used: its bucket does not exist, the storage connection's
    credentials are refused, or the endpoint is wrong. Terminal, checked at plan time before anything
    is frozen (and again inside the job when a storage call fails): fix the location or the connection."""


class StorageUnavailableError(TidemarkError):
    """Object storage did not answer, or failed a request, in a way that a retry may fix (a restart,
    a throttled request). Transient: nothing was committed past the last completed step."""

    transient = True


# --- Spark ------------------------------------------------------------------------------------

class SparkConnectUnavailableError(TidemarkError):
    """The Spark Connect server of the warm path did not answer when the ingest job opened its
    session. Transient: nothing was read or written; the batch stays planned and a retry (or the
    next run) executes the same frozen ranges once the server is up."""

    transient = True
