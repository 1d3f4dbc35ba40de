"""`pip install .` (not editable) into a new virtualenv gives a working `tidemark` CLI, DAG factory and
ingest job: nothing is looked up in the repository checkout at run time.

The new virtualenv gets Tidemark's dependencies from the project's own `.venv` through a `.pth`
line (downloading Airflow and Spark again would take minutes and needs no check of ours); Tidemark
itself is built from a copy of the source (in pip's isolated build environment, as a user's
`pip install .` is) and installed without `-e`, and every command runs from a
folder outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests import helpers

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A new virtualenv with Tidemark installed from a copy of the source (no -e)."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "plugins", source / "plugins", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "tidemark_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                             "--disable-pip-version-check", str(source)],
                            env=clean_env(), cwd=base, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.rmtree(source)  # nothing may be read from the source after the install
    return venv


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_package_is_installed_not_linked(installed, tmp_path):
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import tidemark, tidemark_spark.submit as s; "
                            "print(tidemark.__file__); print(s.INGEST_SCRIPT)"], cwd=tmp_path, env=clean_env(),
                           capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    core, script = where.stdout.split()
    assert core.startswith(str(installed)) and script.startswith(str(installed)), where.stdout
    assert Path(script).name == "ingest.py" and Path(script).exists()


def test_the_airflow_plugin_and_the_pages_templates_are_installed(installed, tmp_path):
    code = ("from importlib.metadata import distribution; d = distribution('tidemark'); "
            "print(sorted(e.value for e in d.entry_points if e.group == 'airflow.plugins')); "
            "print(sorted(str(f) for f in d.files if str(f).endswith('.html'))); "
            "from tidemark_airflow.console_html import render; print(render('not_tidemark.html', dag_id='x')[:15])")
    shown = subprocess.run([str(installed / "bin" / "python"), "-c", code], cwd=tmp_path, env=clean_env(),
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    entry_points, templates, page = shown.stdout.splitlines()
    assert entry_points == "['tidemark_airflow.plugin:TidemarkPlugin']"
    assert all(f"tidemark_airflow/templates/{name}.html" in templates
               for name in ("base", "pipelines", "pipeline", "not_tidemark")), templates
    assert page == "<!doctype html>"


def test_cli_dag_factory_and_one_ingest_run_from_the_installed_package(installed, tmp_path, kafka_bootstrap):
    topic = helpers.create_topic(helpers.unique("install"), partitions=2)
    helpers.produce(topic, 30)
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    env = clean_env(**{k: v for k, v in helpers.service_env(pipelines, lake).items() if k.startswith(("AIRFLOW_CONN",
                                                                                                       "TIDEMARK"))})
    env["TIDEMARK_JAR_CACHE"] = str(ROOT / ".cache" / "jars")
    env.pop("SPARK_HOME", None)  # found from the installed pyspark, as a user's would be
    env.pop("PYSPARK_PYTHON", None)

    listing = subprocess.run([str(installed / "bin" / "tidemark"), "pipelines", "list", "--json"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert [p["name"] for p in json.loads(listing.stdout)["pipelines"]] == [topic]

    factory = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import sys\nfrom tidemark.config import find_pipeline\n"
         "from tidemark_airflow.dag_builder import build_ingest_dag, build_replay_dag\n"
         "c = find_pipeline(sys.argv[1])\nprint(build_ingest_dag(c).dag_id, build_replay_dag(c).dag_id)", topic],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert factory.returncode == 0, factory.stderr[-3000:]
    assert factory.stdout.split()[-2:] == [f"tidemark_ingest__{topic}", f"tidemark_replay__{topic}"]

    run = subprocess.run([str(installed / "bin" / "tidemark"), "run", topic], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "batch 1 frozen" in run.stdout, run.stdout
    rows = helpers.query(str(lake / topic), "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) "
                                            "AS uniq FROM t")
    assert rows == [{"n": 30, "uniq": 30}]
