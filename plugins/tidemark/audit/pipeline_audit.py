"""``tidemark audit PIPELINE [--verify-sample N]``, whole: the output table checked against the ledger
(``live_table``), then, when asked, ``N`` retained ranges read again from Kafka (``sample``), or on a keyed table
``N`` keys compared with their newest change (``keyed_sample``, which also looks for deleted keys still present,
with or without a sample). The run (``tidemark.run.PipelineRun.audit``) hands it the pipeline's connections."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from tidemark.audit.keyed_sample import verify_keys
from tidemark.audit.live_table import AuditReport, audit_tables
from tidemark.audit.sample import verify_sample as verify_ranges
from tidemark.config.audit_schedule import check_verify_sample
from tidemark.config.pipeline import PipelineConfig
from tidemark.errors import ConfigError
from tidemark.ledger.store import Ledger
from tidemark.storage import ObjectStore


def audit_pipeline(config: PipelineConfig, kafka_properties: Callable[[], Mapping[str, str]], ledger_uri: str,
                   store: ObjectStore | None, verify_sample: int = 0, values=None) -> AuditReport:
    """The audit's report. ``kafka_properties`` is called only when Kafka is read (a sample, or a keyed table's
    deleted keys); ``values`` runs the Spark side of both (the adapters pass ``tidemark_spark.audit_decode.launch``).
    A pipeline with a transform is audited by coordinate and refuses a sample (ConfigError: its output is not
    Kafka's values)."""
    try:
        check_verify_sample(verify_sample, config.transform, "--verify-sample")
    except ValueError as exc:
        raise ConfigError(str(exc), pipeline=config.name) from None
    if verify_sample and config.keyed and values is None:
        raise ConfigError(f"--verify-sample on a keyed table compares keys with their newest change in Spark, and "
                          f"no Spark job was given. Run 'tidemark audit {config.name} --verify-sample "
                          f"{verify_sample}' from the command line or the audit DAG.", pipeline=config.name)
    report = audit_tables(config.name, config.table_uri, config.dead_letter_uri, ledger_uri, store,
                          keys=table_keys(config, ledger_uri, store), transformed=config.transform is not None,
                          history=bool(config.keyed and config.keyed.keeps_history))
    if config.keyed and values is not None:  # deleted keys present are looked for with or without a sample
        keyed = verify_keys(config, kafka_properties(), ledger_uri, store, verify_sample, values=values)
        report.deleted_keys_present, report.deleted_keys = keyed.pop("deleted_keys_present"), keyed.pop(
            "deleted_keys")
        report.sample = keyed if verify_sample else None
    elif verify_sample:
        report.sample = verify_ranges(config, kafka_properties(), ledger_uri, store, verify_sample, values=values)
    return report


def table_keys(config: PipelineConfig, ledger_uri: str, store: ObjectStore | None) -> list[str] | None:
    """A keyed table's keys: the pipeline file's, or, left out (Debezium's from the Kafka key), those its newest
    planned batch was frozen with. None for a table without keys."""
    if config.keyed is None:
        return None
    if config.keyed.keys:
        return list(config.keyed.keys)
    for row in sorted(Ledger(ledger_uri, store).rows(config.name), key=lambda r: -r.batch_id):
        if row.frozen_plan:
            keyed = json.loads(row.frozen_plan).get("record_format", {}).get("keyed") or {}
            if keyed.get("keys"):
                return list(keyed["keys"])
    return None  # no batch yet: nothing to check
