"""`pip install .` into new, empty virtualenvs gives a working `tidemark` CLI, Airflow plugin, DAG factory
and ingest job, with nothing borrowed from the project's `.venv` or looked up in the checkout at run time.

Tidemark is built once into a wheel from a copy of the source made a git checkout (in an isolated build
environment, as a user's `pip install .` is; the same build shows what one leaves in a checkout); each
virtualenv is made by `python -m venv` (no system site packages) and gets the wheel with its declared
dependencies from the registry, installed by uv with the lock as constraints (the tested versions). Two
virtualenvs, the two ways the package is installed:
- an Airflow host's, `tidemark`: the CLI, `airflow plugins`, the DAG factory and one batch on the warm
  path (a Spark Connect server; the Spark provider's pyspark-client is the client, no spark-submit);
- a Spark host's, `tidemark[spark]`: one batch by spark-submit (`tidemark run` on a local master).

uv reads its cache first (`--offline`) and asks the registry only for what the cache lacks: the registry
proxy of this machine sends no HTTP cache headers, so uv would otherwise download and build pyspark's
source archive (450 MB) again at every install. The constraints pin every version, so the cache cannot
hand out another one than the registry would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import helpers

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".venv" / "bin" / "uv"


def uv(*args: str, cwd: Path) -> None:
    """``uv <args>`` from the cache alone, else with the registry (a cold cache: the first run)."""
    outputs = []
    for mode in (["--offline"], []):
        result = subprocess.run([str(UV), *args, *mode], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                                timeout=900)
        if result.returncode == 0:
            return
        outputs.append(f"$ uv {' '.join(args + tuple(mode))}\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    pytest.fail("\n".join(outputs))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what points at the project's virtualenv, Airflow or Spark."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SPARK_HOME", "PYSPARK_PYTHON",
                        "PYSPARK_DRIVER_PYTHON") and not k.startswith(("AIRFLOW", "TIDEMARK"))}
    return {**env, **extra}


@dataclass(frozen=True)
class Build:
    wheel: Path
    left_behind: bool
    """The build wrote its build/ folder and the egg-info in the checkout, as setuptools does."""
    git_status: str
    """`git status --porcelain --untracked-files=all` in the checkout after the build."""


GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Build:
    """Tidemark's wheel, built as `pip install .` builds it in a checkout: the same PEP 517 call, by uv, in a git
    repository of the files the build reads and .gitignore (a copy, removed once built). One build serves both
    questions: what the wheel installs, and what the build leaves in the checkout that git would show."""
    base = tmp_path_factory.mktemp("build")
    checkout = base / "checkout"
    shutil.copytree(ROOT / "plugins", checkout / "plugins", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", ".gitignore"):
        shutil.copy(ROOT / name, checkout / name)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run([*GIT, *args], cwd=checkout, check=True, capture_output=True, timeout=60)
    uv("build", "-q", "--wheel", "--out-dir", str(base / "dist"), str(checkout), cwd=base)
    left_behind = (checkout / "build").is_dir() and bool(list((checkout / "plugins").glob("*.egg-info")))
    status = subprocess.run([*GIT, "status", "--porcelain", "--untracked-files=all"], cwd=checkout, check=True,
                            capture_output=True, text=True, timeout=60)
    shutil.rmtree(checkout)  # nothing may be read from the source after the build
    (built,) = (base / "dist").glob("tidemark-*.whl")
    return Build(built, left_behind, status.stdout)


@pytest.fixture(scope="module")
def wheel(build) -> Path:
    return build.wheel


def new_virtualenv(base: Path, wheel: Path, extras: str = "") -> Path:
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    uv("pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-c", str(ROOT / "requirements.lock"),
       f"tidemark{extras} @ {wheel.as_uri()}", cwd=base)
    return venv


@pytest.fixture(scope="module")
def airflow_host(tmp_path_factory, wheel) -> Path:
    """``pip install tidemark``: what the Airflow scheduler, API server and workers need."""
    return new_virtualenv(tmp_path_factory.mktemp("airflow_host"), wheel)


@pytest.fixture(scope="module")
def spark_host(tmp_path_factory, wheel) -> Path:
    """``pip install 'tidemark[spark]'``: spark-submit and its JVM as well."""
    return new_virtualenv(tmp_path_factory.mktemp("spark_host"), wheel, "[spark]")


def run_in(venv: Path, command: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: int = 120) -> subprocess.CompletedProcess:
    """``command`` from the virtualenv's bin folder (first on PATH, as an activated virtualenv has it)."""
    env = env if env is not None else clean_env()
    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    return subprocess.run([str(venv / "bin" / command), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


WHERE = ("import json, sys, importlib.metadata as m, tidemark, tidemark_spark.submit as s\n"
         "names = {d.metadata['Name'].lower() for d in m.distributions()}\n"
         "print(json.dumps({'path': sys.path, 'core': tidemark.__file__, 'script': s.INGEST_SCRIPT,"
         " 'pyspark': 'pyspark' in names, 'pyspark_client': 'pyspark-client' in names}))")


@pytest.mark.parametrize("host", ["airflow_host", "spark_host"])
def test_the_package_is_installed_not_linked_and_nothing_is_borrowed(host, request, tmp_path):
    venv: Path = request.getfixturevalue(host)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    shown = run_in(venv, "python", "-c", WHERE, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    where = json.loads(shown.stdout)
    borrowed = [p for p in where["path"] if ("site-packages" in p or "dist-packages" in p)
                and not p.startswith(str(venv))]
    assert not borrowed, f"{host} imports from outside itself: {borrowed}"
    assert where["core"].startswith(str(venv)) and where["script"].startswith(str(venv)), where
    assert Path(where["script"]).name == "ingest_job.py" and Path(where["script"]).exists()
    # the Spark extra is what brings spark-submit; the Airflow host has the Connect client only
    assert where["pyspark_client"], where
    assert where["pyspark"] == (host == "spark_host"), where
    assert (venv / "bin" / "spark-submit").exists() == (host == "spark_host")


def test_airflow_lists_the_tidemark_plugin_and_the_pages_templates_are_installed(airflow_host, tmp_path):
    home = tmp_path / "airflow_home"
    listed = run_in(airflow_host, "airflow", "plugins", "-o", "json", cwd=tmp_path,
                    env=clean_env(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False"))
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-3000:]
    plugins = {p["name"]: p for p in json.loads(listed.stdout)}
    assert "tidemark" in plugins, f"`airflow plugins` lists {sorted(plugins)}"
    assert plugins["tidemark"]["source"].startswith("tidemark=="), plugins["tidemark"]
    assert "tidemark_airflow.plugin:TidemarkPlugin" in plugins["tidemark"]["source"], plugins["tidemark"]
    assert [app["url_prefix"] for app in plugins["tidemark"]["fastapi_apps"]] == ["/tidemark"]

    code = ("from importlib.metadata import distribution; d = distribution('tidemark'); "
            "print(sorted(str(f) for f in d.files if str(f).endswith('.html'))); "
            "from tidemark_airflow.console_html import render; print(render('not_tidemark.html', dag_id='x')[:15])")
    shown = run_in(airflow_host, "python", "-c", code, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    templates, page = shown.stdout.splitlines()
    assert all(f"tidemark_airflow/templates/{name}.html" in templates
               for name in ("base", "pipelines", "pipeline", "not_tidemark")), templates
    assert page == "<!doctype html>"


def pipeline_env(tmp_path: Path, topic: str, **extra: str) -> dict[str, str]:
    """A pipelines folder with one pipeline on ``topic``, a lake, and the test broker's connection."""
    pipelines, lake = tmp_path / "pipelines", tmp_path / "lake"
    pipelines.mkdir()
    (pipelines / f"{topic}.yaml").write_text(f"name: {topic}\ntopics: [{topic}]\ntable: {topic}\n")
    service = helpers.service_env(pipelines, lake)
    chosen = {k: v for k, v in service.items() if k.startswith(("AIRFLOW_CONN", "TIDEMARK"))}
    return clean_env(**{**chosen, "AIRFLOW_HOME": str(tmp_path / "airflow_home"), **extra})


def ingest_one_batch(venv: Path, topic: str, env: dict[str, str], tmp_path: Path) -> None:
    """``tidemark run``: batch 1 holds the topic's 30 records, each once."""
    run = run_in(venv, "tidemark", "run", topic, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "batch 1 frozen" in run.stdout, run.stdout
    rows = helpers.query(str(tmp_path / "lake" / topic),
                         "SELECT COUNT(*) AS n, COUNT(DISTINCT (kafka_partition, kafka_offset)) AS uniq FROM t")
    assert rows == [{"n": 30, "uniq": 30}]


def test_cli_dag_factory_and_a_warm_path_batch_on_the_airflow_host(airflow_host, tmp_path, kafka_bootstrap,
                                                                    spark_connect):
    topic = helpers.create_topic(helpers.unique("install"), partitions=2)
    helpers.produce(topic, 30)
    env = pipeline_env(tmp_path, topic, AIRFLOW_CONN_SPARK_DEFAULT=helpers.spark_connect_connection(spark_connect))

    listing = run_in(airflow_host, "tidemark", "pipelines", "list", "--json", cwd=tmp_path, env=env)
    assert listing.returncode == 0, listing.stderr
    assert [p["name"] for p in json.loads(listing.stdout)["pipelines"]] == [topic]

    factory = run_in(airflow_host, "python", "-c", "import sys\nfrom tidemark.config.pipeline import find_pipeline\n"
                     "from tidemark_airflow.dag_builder import build_ingest_dag, build_replay_dag\n"
                     "c = find_pipeline(sys.argv[1])\nprint(build_ingest_dag(c).dag_id, build_replay_dag(c).dag_id)",
                     topic, cwd=tmp_path, env=env, timeout=300)
    assert factory.returncode == 0, factory.stderr[-3000:]
    assert factory.stdout.split()[-2:] == [f"tidemark_ingest__{topic}", f"tidemark_replay__{topic}"]

    ingest_one_batch(airflow_host, topic, env, tmp_path)


def test_one_spark_submit_batch_on_the_spark_host(spark_host, tmp_path, kafka_bootstrap):
    topic = helpers.create_topic(helpers.unique("install"), partitions=2)
    helpers.produce(topic, 30)
    # SPARK_HOME is found from the installed pyspark, as a user's would be; the JVM jars (Kafka source,
    # Delta) are the ones `make jars` resolved from Maven Central
    env = pipeline_env(tmp_path, topic, TIDEMARK_JAR_CACHE=str(ROOT / ".cache" / "jars"))
    ingest_one_batch(spark_host, topic, env, tmp_path)


def test_building_in_a_checkout_leaves_nothing_git_shows(build):
    """Issue 42: `pip install .` builds the wheel in the checkout (setuptools writes build/ and the egg-info
    there); .gitignore keeps both out of `git status`. The module's one build (``build``) is such a build."""
    assert build.left_behind  # what the build leaves
    assert build.git_status == ""
