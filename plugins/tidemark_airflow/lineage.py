"""OpenLineage for the ingest task: Kafka topics in, the Delta table (and its dead letters) out, and
the committed batch as a run facet. Dataset names follow the OpenLineage naming spec: a Kafka topic
is namespace ``kafka://<host>:<port>`` (the first bootstrap server), name = topic; a table on S3 is
``s3://<bucket>`` + key, a local one ``file`` + absolute path. The provider's listener calls the
operator's ``get_openlineage_facets_on_complete``; without an OpenLineage transport configured it
stays disabled and nothing here runs."""

from __future__ import annotations

from pathlib import Path

from attrs import define
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import RunFacet

FACET = "tidemark_batch"


@define
class TidemarkBatchRunFacet(RunFacet):
    """The batch a run committed: pipeline, batch id, kind, offset ranges with their counts, totals
    and the output's Delta version (``tidemark.batch.batch_summary``)."""

    pipeline: str
    batch_id: int
    kind: str | None = None
    ranges: list[dict] | None = None
    records: int | None = None
    dead_letters: int | None = None
    delta_version: int | None = None


def kafka_namespace(bootstrap_servers: str) -> str:
    first = bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first.split('://', 1)[-1]}"


def table_dataset(table_uri: str) -> Dataset:
    if "://" not in table_uri:
        return Dataset(namespace="file", name=str(Path(table_uri).absolute()))
    scheme, rest = table_uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    return Dataset(namespace=f"{'s3' if scheme == 's3a' else scheme}://{bucket}", name=key)


def batch_lineage(summary: dict, topics: list[str], bootstrap_servers: str, dead_letter_uri: str | None):
    from airflow.providers.openlineage.extractors import OperatorLineage

    outputs = [table_dataset(summary["table"])]
    if dead_letter_uri and summary.get("dead_letters"):
        outputs.append(table_dataset(dead_letter_uri))
    facet = TidemarkBatchRunFacet(**{k: summary.get(k) for k in ("pipeline", "batch_id", "kind", "ranges", "records",
                                                                 "dead_letters", "delta_version")})
    return OperatorLineage(inputs=[Dataset(namespace=kafka_namespace(bootstrap_servers), name=t) for t in topics],
                           outputs=outputs, run_facets={FACET: facet})
