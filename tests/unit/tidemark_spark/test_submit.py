"""Launching the Spark job (tidemark_spark.submit): its local environment."""

from __future__ import annotations

from pathlib import Path


def test_spark_jobs_log_the_kafka_client_at_warn_unless_the_caller_has_a_spark_conf_dir(monkeypatch, tmp_path):
    from tidemark_spark.submit import LOG4J_CONFIG, local_spark_env

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dcaller=1")
    env = local_spark_env()
    # Tidemark's logging comes as a system property, after the caller's JVM options; its configuration
    # folder is empty (so that the JVM may share class data: tidemark_spark.class_data)
    assert env["SPARK_SUBMIT_OPTS"] == f"-Dcaller=1 -Dlog4j2.configurationFile={LOG4J_CONFIG}"
    assert Path(env["SPARK_CONF_DIR"]).is_dir() and not any(Path(env["SPARK_CONF_DIR"]).iterdir())
    lines = Path(LOG4J_CONFIG).read_text().splitlines()
    assert "logger.kafka.name = org.apache.kafka" in lines and "logger.kafka.level = warn" in lines
    assert "rootLogger.level = info" in lines  # Spark's own progress stays
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert local_spark_env()["SPARK_CONF_DIR"] == str(tmp_path)
    assert "SPARK_SUBMIT_OPTS" not in local_spark_env()  # the caller's folder decides the logging


def test_in_a_checkout_spark_submit_runs_the_job_script_in_spark_jobs():
    """The guide's layout: the operator and `tidemark run` submit spark_jobs/ingest.py (a wheel install,
    which has no spark_jobs/, submits the installed module: tests/integration/test_install.py)."""
    from pathlib import Path

    from tidemark_spark.submit import INGEST_SCRIPT

    root = Path(__file__).resolve().parents[3]
    assert INGEST_SCRIPT == str(root / "spark_jobs" / "ingest.py")
    assert "from tidemark_spark.ingest_job import run_and_exit" in Path(INGEST_SCRIPT).read_text()


def test_the_core_archive_carries_bytecode_that_imports_without_compiling_and_keeps_source_lines(monkeypatch,
                                                                                              tmp_path):
    """A job imports the core from the `--py-files` zip, where Python keeps no bytecode of its own: the zip holds a
    hash-checked ``.pyc`` beside each ``.py``, which the import uses, and a traceback still shows the source."""
    import subprocess
    import sys
    import tempfile
    import zipfile

    from tidemark_spark.submit import core_archive

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    archive = core_archive()
    assert archive.startswith(str(tmp_path)) and sys.implementation.cache_tag in archive
    names = set(zipfile.ZipFile(archive).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert "tidemark/config/pipeline.py" in sources and "tidemark_spark/ingest_job.py" in sources
    assert {n for n in names if n.endswith(".pyc")} == {f"{n}c" for n in sources}
    script = ("import sys; sys.path.insert(0, sys.argv[1]); sys.dont_write_bytecode = True\n"
              "import tidemark.formats.records as m; print(m.__file__)\n"
              "from tidemark.config.pipeline import load_pipeline\n"
              "import traceback\n"
              "try: load_pipeline('not a Path')\n"
              "except AttributeError: print(traceback.format_exc(), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, archive], capture_output=True, text=True)
    # the module came from the archive's bytecode
    assert done.stdout == f"{archive}/tidemark/formats/records.pyc\n", done
    # a formatted traceback (as the job logs one) names the source in the archive and shows its line
    source = f'File "{archive}/tidemark/config/pipeline.py", line '
    assert source in done.stderr and ".read_text()" in done.stderr, done.stderr


def test_under_spark_submit_the_job_ignores_an_environment_that_would_make_it_a_connect_client(monkeypatch, caplog):
    """pyspark's builder becomes a Spark Connect client when SPARK_REMOTE or SPARK_CONNECT_MODE_ENABLED is set (the
    latter passes to every process a process that opened a Connect session starts); the spark-submit job must stay
    on its own JVM."""
    import os

    from tidemark_spark.ingest_job import drop_connect_environment

    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    assert drop_connect_environment("orders") == ["SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"]
    assert "SPARK_REMOTE" not in os.environ and "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    assert "pipeline 'orders': SPARK_REMOTE is set in the job's environment; ignored" in caplog.text
    assert drop_connect_environment("orders") == []
