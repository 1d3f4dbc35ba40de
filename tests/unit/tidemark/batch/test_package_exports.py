"""``tidemark.batch`` exports its names lazily (``_EXPORTS``) so that the Spark job loads only the modules it runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[4] / "plugins"


def test_every_exported_name_is_its_modules_object():
    import tidemark.batch as batch

    assert sorted(batch._EXPORTS) == sorted(batch.__all__)
    for name, module in batch._EXPORTS.items():
        assert getattr(batch, name) is getattr(importlib.import_module(f"tidemark.batch.{module}"), name)
    try:
        batch.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_the_ingest_job_does_not_load_the_pipeline_configuration_or_the_run():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, tidemark_spark.ingest_job; "
                               "print(sorted(m for m in sys.modules if m.startswith(('tidemark', 'yaml'))))"],
        env={"PYTHONPATH": str(PLUGINS), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
    ).stdout
    for module in ("tidemark.config.pipeline", "tidemark.run", "tidemark.kafka.planner", "tidemark.batch.prepare",
    "yaml"):
        assert f"'{module}'" not in loaded, loaded
    assert "'tidemark.batch.execute'" in loaded and "'tidemark.batch.job_settings'" in loaded
