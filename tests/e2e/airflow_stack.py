"""A client of a running `make airflow` stack (scripts/airflow.sh), shared by the tests that start one:
its REST API (with the operator's login), a shell with the stack's environment (the env.sh that `up`
wrote) and the `tidemark` command in it; and the settings the tests' stacks run with."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

# What the tests' stacks add to `up`'s settings (in its environment, which env.sh leaves alone). The
# dag-processor parses every DAG file again every [dag_processor] min_file_process_interval (Airflow's default
# 30 s), changed or not: about 3 CPU-seconds a round here (measured: the pipelines' DAG file 1.2 s and the
# example DAG's 0.7 s in a forked parser, plus the DB updates), on the two cores the whole test run shares, for
# DAG files no test changes. Here each is parsed once, when the dag-processor starts (or restarts): no module
# lives an hour. A pipeline file rewritten under the running stack (test_local_airflow's table move) reaches the
# next run's tasks, which parse their DAG file themselves, before the dag-processor: as in production when the
# run starts within the interval.
TEST_SETTINGS = {"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600"}
# Where pyspark is, as scripts/env.sh finds it (a Python start importing pyspark: about 0.2 CPU-seconds)
# for each script and CLI call of a test that does not set it; given here to the calls after `up`, which
# itself still finds it as `make airflow` does.
SPARK_HOME = str(Path(importlib.util.find_spec("pyspark").origin).parent)


class AirflowStack:
    def __init__(self, env: dict[str, str], home: Path, url: str, user: str, password: str) -> None:
        self.env, self.home, self.url, self.user, self.password = env, home, url, user, password
        self.token: str | None = None

    def shell(self, command: str) -> str:
        """A command with this Airflow's environment (the env.sh that `up` wrote)."""
        result = subprocess.run(["bash", "-c", f"source {self.home}/env.sh && {command}"],
                                env={"SPARK_HOME": SPARK_HOME, **self.env}, capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 0, f"{command} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        return result.stdout

    def tidemark(self, *args: str):
        return json.loads(self.shell(" ".join(["tidemark", *args, "--json"])))

    def api(self, method: str, path: str, **kwargs):
        """A call to the REST API (``/api/v2`` + path) as the stack's operator login; asserts success."""
        import httpx

        if self.token is None:
            login = httpx.post(f"{self.url}/auth/token", json={"username": self.user, "password": self.password},
                               timeout=30)
            assert login.status_code == 201, login.text
            self.token = login.json()["access_token"]
        response = httpx.request(method, f"{self.url}/api/v2{path}", timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"}, **kwargs)
        assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text[:500]}"
        return response.json()


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def log_tails(home: Path, lines: int = 12) -> str:
    """The last lines of each log of a stack (its home's and its services'), for an `up` that did not end."""
    tails = []
    for log in sorted([*home.glob("*.log"), *home.glob("logs/services/*.log")]):
        tails.append(f"--- {log}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(tails)


@contextlib.contextmanager
def started(script: Path, env: dict[str, str], home: Path, pg_home: Path, timeout: int = 400
            ) -> Iterator[tuple[str, str, str, str]]:
    """`scripts/airflow.sh up` with ``env``; yields its output, the UI's URL and the operator's login, then
    `down`, and checks no process of the stack (its home, its PostgreSQL) is left running."""
    started_at = time.monotonic()
    try:
        up = subprocess.run([str(script), "up"], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # `down` below stops what it started; its logs say where it stood
        up = subprocess.CompletedProcess(exc.cmd, f"timed out after {timeout} s", _text(exc.stdout),
                                         f"{_text(exc.stderr)}\n{log_tails(home)}")
    try:
        assert up.returncode == 0, f"scripts/airflow.sh up failed ({up.returncode}):\n{up.stdout[-3000:]}\n" \
                                   f"{up.stderr[-6000:]}"
        url = re.search(r"UI:\s+(\S+)", up.stdout).group(1)
        user, password = re.search(r"login:\s+(\S+) / (\S+)", up.stdout).groups()
        print(f"airflow.sh up in {time.monotonic() - started_at:.0f} s\n{up.stdout}")
        yield up.stdout, url, user, password
    finally:
        down = subprocess.run([str(script), "down"], env={"SPARK_HOME": SPARK_HOME, **env}, capture_output=True,
                              text=True, timeout=300)
        assert down.returncode == 0, down.stderr
        assert "airflow: stopped" in down.stdout
        left = [subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True).stdout.split()
                for path in (home, pg_home)]
        assert left == [[], []], f"processes left running after `airflow.sh down`: {left}"
        shutil.rmtree(pg_home, ignore_errors=True)
