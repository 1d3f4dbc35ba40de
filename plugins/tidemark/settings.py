"""Process-wide settings read from the environment, with the documented defaults."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LAKE_ROOT = "./lake"
LEDGER_SUBPATH = "_tidemark/offsets"


def lake_root() -> str:
    """Where relative table locations resolve (``TIDEMARK_LAKE_ROOT``, default ``./lake``)."""
    return os.environ.get("TIDEMARK_LAKE_ROOT", DEFAULT_LAKE_ROOT)


def pipelines_dir() -> Path:
    """The folder of pipeline YAML files (``TIDEMARK_PIPELINES_DIR``, default ``dags/pipelines``)."""
    configured = os.environ.get("TIDEMARK_PIPELINES_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "dags" / "pipelines"


def resolve_table_uri(location: str, root: str | None = None) -> str:
    """Resolve a table location: URIs (``s3a://``, ``file:///``) and absolute paths pass through;
    relative paths resolve under the lake root and are made absolute."""
    if "://" in location or location.startswith("/"):
        return location
    base = root if root is not None else lake_root()
    if "://" in base:
        return base.rstrip("/") + "/" + location
    return str((Path(base) / location).resolve())


def ledger_uri(root: str | None = None) -> str:
    """The ledger table's location: ``TIDEMARK_LEDGER_URI`` or ``<lake root>/_tidemark/offsets``."""
    return os.environ.get("TIDEMARK_LEDGER_URI") or resolve_table_uri(LEDGER_SUBPATH, root)


def jar_dir() -> Path:
    """The cached Spark jars (Kafka source, Delta), fetched by ``scripts/fetch_jars.sh``."""
    configured = os.environ.get("TIDEMARK_JAR_CACHE")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / ".cache" / "jars"
    return base / "spark"


def spark_jars() -> list[str]:
    """Paths of every cached Spark jar, sorted, for ``--jars`` / ``spark.jars``."""
    return sorted(str(p) for p in jar_dir().glob("*.jar"))
