"""What the Spark job needs beside its frozen plan, and how its launchers hand it over: the Kafka client properties
(which may hold credentials) and the object store, in a settings file only its user can read. A module of its own
so that the job (``tidemark_spark.ingest_job``) reads them without importing the run's adapters (``tidemark.run``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidemark import storage
from tidemark.errors import ConfigError
from tidemark.storage import ObjectStore

SETTINGS_FILE_ENV_VAR = "TIDEMARK_JOB_SETTINGS"
"""The path of the job's settings file (``JobSettings``, mode 0600): how the launchers hand the job its
credentials. Only the path travels in the environment, which the Spark provider turns into spark-submit
arguments on YARN and Kubernetes masters; the credentials never reach a command line."""
KAFKA_ENV_VAR = "TIDEMARK_KAFKA_PROPERTIES"
"""The Kafka client properties as JSON in the environment: what a job started by hand (the benchmark's
baselines, tests) may give instead of a settings file."""
SECRET_ENV_VARS = (KAFKA_ENV_VAR, storage.ENV_VAR)
"""The environment variables of that form that hold credentials."""


@dataclass(frozen=True)
class JobSettings:
    """What the Spark job needs beside its frozen plan: the Kafka client properties and the object store."""

    kafka_properties: Mapping[str, str]
    store: ObjectStore | None

    def to_json(self) -> str:
        return json.dumps({"kafka_properties": dict(self.kafka_properties),
                           "store": json.loads(self.store.to_json()) if self.store else None})

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> JobSettings:
        """The settings file named by TIDEMARK_JOB_SETTINGS, else TIDEMARK_KAFKA_PROPERTIES (and
        TIDEMARK_STORAGE_OPTIONS) as JSON."""
        env = os.environ if environ is None else environ
        path = env.get(SETTINGS_FILE_ENV_VAR)
        if path:
            try:
                data = json.loads(Path(path).read_text())
            except OSError as exc:
                raise ConfigError(f"the job's settings file {path} cannot be read ({exc.strerror}): the ingest "
                                  f"job must run where its launcher wrote it (client deploy mode)") from None
            store = data.get("store")
            return cls(data["kafka_properties"], ObjectStore(**store) if store else None)
        raw = env.get(KAFKA_ENV_VAR)
        if not raw:
            raise ConfigError(f"neither {SETTINGS_FILE_ENV_VAR} nor {KAFKA_ENV_VAR} is set: the ingest job's "
                              f"launcher passes the Kafka client properties in a settings file or the environment")
        store = env.get(storage.ENV_VAR)
        return cls(json.loads(raw), ObjectStore.from_json(store) if store else None)


@contextlib.contextmanager
def settings_file(settings: JobSettings) -> Iterator[dict[str, str]]:
    """Write the job's settings to a file only this user can read (mode 0600, in a folder of mode 0700)
    for as long as the block runs; yields the environment that names it (no secret in it)."""
    folder = Path(tempfile.mkdtemp(prefix="tidemark-job-"))
    path = folder / "settings.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(settings.to_json())
    try:
        yield {SETTINGS_FILE_ENV_VAR: str(path)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
