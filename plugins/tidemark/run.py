"""One run of a pipeline, wired once.

Every adapter (the Airflow tasks and operator, the CLI, the benchmark) starts from the same object: it
resolves the pipeline's configuration, its object store, its Kafka properties, its Schema Registry and
its Spark master through a ``ConnectionResolver`` (Airflow's, or environment variables), each once, and
hands them to the batch protocol (``tidemark.batch``) explicitly. Nothing is set process-wide, so two
runs of pipelines on different stores can live in one process (the Tidemark page serves them side by
side).

    run = PipelineRun.open("orders", resolver)
    plan = run.prepare(owner="scheduled__2026-11-26")     # recover, or plan and freeze
    with run.job_environment() as env:                    # a 0600 settings file: secrets never in argv
        ...launch the job (tidemark_spark.submit.launch, or the Airflow operator)...
    run.report()                                          # mirror to the consumer group, log the lag

The Spark job receives the same values through ``job_environment`` (a settings file of mode 0600 that
the launcher deletes when the job ends; only its path travels in the environment) and reads them back
with ``JobSettings.from_environment``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from tidemark import connections, settings, storage
from tidemark.batch import (
    BackfillRequest,
    BatchPlan,
    ResetOutcome,
    ResetRequest,
    batch_summary,
    history,
    mirror_to_consumer_group,
    overview,
    partition_status,
    prepare_backfill,
    prepare_batch,
    recent_entries,
    reset_offsets,
)
from tidemark.batch.job_settings import JobSettings, settings_file
from tidemark.batch.ownership import RunStateLookup
from tidemark.config.pipeline import PipelineConfig, find_pipeline
from tidemark.connections import ConnectionResolver
from tidemark.errors import ConfigError, TidemarkError
from tidemark.kafka.client import secret_values
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore

log = logging.getLogger("tidemark")

class PipelineRun:
    """A pipeline with its connections resolved: the one entry point of every adapter."""

    def __init__(self, config: PipelineConfig, resolver: ConnectionResolver, ledger_uri: str,
                 store: ObjectStore | None) -> None:
        self.config = config
        self.resolver = resolver
        self.ledger_uri = ledger_uri
        self.store = store

    @classmethod
    def open(cls, pipeline: str | PipelineConfig, resolver: ConnectionResolver, *,
             ledger_uri: str | None = None) -> PipelineRun:
        """Load the pipeline (by name, from the pipelines folder) and read its storage connection when
        one of its tables is on object storage. Kafka, the registry and Spark are read when first used."""
        config = find_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
        uri = ledger_uri or settings.ledger_uri()
        store = storage.store_for([config.table_uri, config.dead_letter_uri, uri], resolver,
                                  config.storage_conn_id, config.name)
        return cls(config, resolver, uri, store)

    @classmethod
    def for_plan(cls, plan: BatchPlan, resolver: ConnectionResolver, folder: Path | None = None) -> PipelineRun:
        """The run that executes a frozen batch: the pipeline as configured now (from ``folder``, default
        the pipelines folder), with the store of the locations the batch was frozen for (its tables and
        ledger), which the job writes."""
        config = find_pipeline(plan.pipeline, folder)
        store = storage.store_for([plan.table_uri, plan.dead_letter_uri, plan.ledger_uri], resolver,
                                  config.storage_conn_id, config.name)
        return cls(config, resolver, plan.ledger_uri, store)

    @property
    def name(self) -> str:
        return self.config.name

    @cached_property
    def kafka_properties(self) -> dict[str, str]:
        return connections.kafka_properties(self.resolver, self.config.kafka_conn_id, self.name)

    @cached_property
    def schema_registry(self):
        """The Schema Registry client of an Avro pipeline (None for other formats)."""
        if not self.config.uses_registry:
            return None
        from tidemark.formats.schema_registry import client_for

        return client_for(self.resolver, self.config.schema_registry_conn_id, self.name)

    @cached_property
    def spark_master(self) -> str:
        return connections.spark_master(self.resolver, self.config.spark_conn_id, self.name)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.ledger_uri, self.store)

    def with_config(self, **changes) -> PipelineRun:
        """The same run with some configuration values replaced (a capped run's max_offsets_per_run)."""
        return PipelineRun(self.config.model_copy(update=changes), self.resolver, self.ledger_uri, self.store)

    def prepare(self, *, owner: str | None = None, run_state: RunStateLookup | None = None,
                backfill: BackfillRequest | None = None, take_over: str | None = None) -> BatchPlan:
        """Recover the pending batch, or plan and freeze the next one (or a backfill). ``take_over``:
        the reason to take the pending batch over from a run whose state says it is alive."""
        common = {"owner": owner, "ledger_uri": self.ledger_uri, "store": self.store, "run_state": run_state,
                  "schemas": self.schema_registry}
        if backfill is not None:
            return prepare_backfill(self.config, self.kafka_properties, backfill, **common)
        return prepare_batch(self.config, self.kafka_properties, take_over=take_over, **common)

    def move_ledger(self, source_uri: str) -> int:
        """Copy this pipeline's rows from the ledger at ``source_uri`` into its ledger (``batch.relocate``)."""
        from tidemark.batch.relocate import move_ledger

        source_store = storage.store_for([source_uri], self.resolver, self.config.storage_conn_id, self.name)
        return move_ledger(self.name, Ledger(source_uri, source_store or self.store), self.ledger)

    @cached_property
    def spark_deploy_mode(self) -> str | None:
        """The Spark connection's ``deploy-mode`` (``client`` unless it says ``cluster``)."""
        return connections.spark_deploy_mode(self.resolver, self.config.spark_conn_id, self.name)

    def check_spark_connection(self) -> None:
        """What the ingest task will need of the Spark connection, checked before a batch is frozen for it:
        that it is defined, and not a cluster deploy mode with credentials to pass (ConfigError)."""
        self.spark_master  # noqa: B018  (reading it raises when the connection is not defined)
        refuse_cluster_deploy_mode(self.spark_deploy_mode, self)

    @contextlib.contextmanager
    def job_environment(self) -> Iterator[dict[str, str]]:
        """The ingest job's environment while the block runs: the path of its settings file (Kafka
        properties and the object store, ``JobSettings``), deleted when the block ends."""
        with settings_file(JobSettings(self.kafka_properties, self.store)) as env:
            yield env

    def status(self, timeout_seconds: float | None = None) -> list[dict]:
        """``tidemark offsets show --json``: per partition, committed and latest offsets and the lag."""
        return partition_status(self.config, self.kafka_properties, self.ledger_uri, store=self.store,
                                timeout_seconds=timeout_seconds)

    def overview(self, *, timeout_seconds: float | None = None, last_run_failed: bool = False) -> dict:
        """The pipeline at a glance (the Tidemark page). A Kafka connection that cannot be read is shown
        as the reason Kafka's numbers are missing, not as a failure."""
        try:
            properties, reason = self.kafka_properties, None
        except TidemarkError as exc:
            properties, reason = None, str(exc)
        return overview(self.config, properties, self.ledger_uri, store=self.store, timeout_seconds=timeout_seconds,
                        last_run_failed=last_run_failed, kafka_error=reason)

    def history(self, limit: int) -> list[dict]:
        return history(self.name, limit, self.ledger_uri, store=self.store)

    def recent_entries(self, count: int) -> list[dict]:
        return recent_entries(self.name, count, self.ledger_uri, store=self.store)

    def reset(self, request: ResetRequest) -> ResetOutcome:
        return reset_offsets(self.config, self.kafka_properties, request, ledger_uri=self.ledger_uri, store=self.store)

    def audit(self, verify_sample: int = 0, values=None):
        """``tidemark audit`` (``tidemark.audit.pipeline_audit``), with this run's connections."""
        from tidemark.audit.pipeline_audit import audit_pipeline

        return audit_pipeline(self.config, lambda: self.kafka_properties, self.ledger_uri, self.store, verify_sample,
                              values=values)

    def reserve_reprocess(self, *, batch_id: int | None, reason: str, owner: str):
        """``tidemark dead-letters reprocess``: reserve the ledger entry (``tidemark.operations.reprocessing``)."""
        from tidemark.operations.reprocessing import reserve

        return reserve(self.config, self.ledger, self.schema_registry, batch_id=batch_id, reason=reason, owner=owner,
                       store=self.store)

    def maintain(self) -> dict:
        """The maintenance DAG's task: OPTIMIZE, VACUUM and checkpoints (``tidemark.operations.table_maintenance``)."""
        from tidemark.operations.table_maintenance import maintain

        return maintain(self.config, self.ledger_uri, self.store)

    def batch_summary(self, plan: BatchPlan) -> dict:
        return batch_summary(plan, self.store)

    def report(self) -> list[dict]:
        """After every run (by the ingest task after its commit, by the plan task when there was nothing
        to read, by ``tidemark run``): mirror the committed offsets to the pipeline's consumer group and
        log committed offset, latest offset and lag per partition. Best effort: the batch is committed
        (or there was none), so a failure here is a warning, and the next run mirrors again."""
        try:
            mirror_to_consumer_group(self.config, self.kafka_properties, self.ledger_uri, store=self.store)
            rows = self.status()
        except Exception as exc:
            log.warning("pipeline '%s': could not mirror the committed offsets to its consumer group or read the lag "
                        "(%s); the data and the ledger are not affected, and the next run mirrors again", self.name,
                        exc)
            return []
        log.info("pipeline '%s' after this run (table %s, ledger %s):", self.name, self.config.table_uri,
                 self.ledger_uri)
        for row in rows:
            log.info("  %s:%s committed=%s latest=%s lag=%s last_batch=%s", row["topic"], row["partition"],
                     row["committed_offset"], row["latest_offset"], row["lag"], row["last_batch_id"])
        log.info("  total lag: %d", sum(r["lag"] or 0 for r in rows))
        return rows


def refuse_cluster_deploy_mode(deploy_mode: str | None, run: PipelineRun) -> None:
    """The job reads its credentials from a settings file (mode 0600) on the launching host: in cluster
    deploy mode its driver runs on another host and could not read it, and the Spark provider would put any
    other way in (``env_vars``) on the spark-submit command line. Refuse rather than expose them."""
    if deploy_mode != "cluster":
        return
    if secret_values(run.kafka_properties) or (run.store is not None and run.store.secrets()):
        raise ConfigError("the Spark connection's deploy-mode is 'cluster': the driver would run on another host, "
                          "which cannot read the job's settings file, and the credentials of the Kafka or storage "
                          "connection must not go on the spark-submit command line. Use client deploy mode (the "
                          "default; the executors still run on the cluster), or leave the connections' secrets "
                          "empty (an instance role or IRSA)", pipeline=run.name, step="ingest")
