"""Process-wide settings read from the environment, with the documented defaults."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LAKE_ROOT = "./lake"
LEDGER_SUBPATH = "_tidemark/offsets"


def lake_root() -> str:
    """Where relative table locations resolve (``TIDEMARK_LAKE_ROOT``, default ``./lake``)."""
    return os.environ.get("TIDEMARK_LAKE_ROOT", DEFAULT_LAKE_ROOT)


PIPELINES_DIR_ENV = "TIDEMARK_PIPELINES_DIR"


def pipelines_dir(default: Path | None = None) -> Path:
    """The folder of pipeline YAML files: ``TIDEMARK_PIPELINES_DIR``, else ``default`` (the DAG file
    passes the ``pipelines`` folder beside it), else ``dags/pipelines`` under the working directory."""
    configured = os.environ.get(PIPELINES_DIR_ENV)
    if configured:
        return Path(configured)
    return default if default is not None else Path("dags") / "pipelines"


def same_location(uri: str) -> str:
    """A table location in one spelling, to compare two: ``s3a://`` as ``s3://``, no ``file://``, no trailing slash."""
    uri = uri.rstrip("/")
    if uri.startswith("s3a://"):
        return "s3://" + uri.removeprefix("s3a://")
    return uri.removeprefix("file://")


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
    """The Spark jars (Kafka source, Delta) that ``make jars`` resolves from Maven Central:
    ``$TIDEMARK_JAR_CACHE/spark``, default ``.cache/jars/spark`` under the working directory
    (``scripts/env.sh`` sets the variable for every make target). Nothing is looked up relative
    to where Tidemark is installed, so a wheel works as well as a checkout."""
    return Path(os.environ.get("TIDEMARK_JAR_CACHE") or Path(".cache") / "jars") / "spark"


def spark_jars() -> list[str]:
    """Paths of every cached Spark jar, sorted, for ``--jars`` / ``spark.jars``."""
    return sorted(str(p) for p in jar_dir().glob("*.jar"))


def require_spark_jars() -> list[str]:
    """The Spark jars, or a ConfigError that says how to get them."""
    jars = spark_jars()
    if not jars:
        from tidemark.errors import ConfigError

        raise ConfigError(f"no Spark jars (Kafka source, Delta) in {jar_dir()}: run `make jars`, or point "
                          f"TIDEMARK_JAR_CACHE at the folder that holds spark/*.jar")
    return jars
