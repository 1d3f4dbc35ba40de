"""A client of a running `make airflow` stack (scripts/airflow.sh), shared by the tests that start one:
its REST API (with the operator's login), a shell with the stack's environment (the env.sh that `up`
wrote) and the `tidemark` command in it."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path


class AirflowStack:
    def __init__(self, env: dict[str, str], home: Path, url: str, user: str, password: str) -> None:
        self.env, self.home, self.url, self.user, self.password = env, home, url, user, password
        self.token: str | None = None

    def shell(self, command: str) -> str:
        """A command with this Airflow's environment (the env.sh that `up` wrote)."""
        result = subprocess.run(["bash", "-c", f"source {self.home}/env.sh && {command}"], env=self.env,
                                capture_output=True, text=True, timeout=180)
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


@contextlib.contextmanager
def started(script: Path, env: dict[str, str], home: Path, pg_home: Path, timeout: int = 400
            ) -> Iterator[tuple[str, str, str, str]]:
    """`scripts/airflow.sh up` with ``env``; yields its output, the UI's URL and the operator's login, then
    `down`, and checks no process of the stack (its home, its PostgreSQL) is left running."""
    started_at = time.monotonic()
    up = subprocess.run([str(script), "up"], env=env, capture_output=True, text=True, timeout=timeout)
    try:
        assert up.returncode == 0, f"scripts/airflow.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        url = re.search(r"UI:\s+(\S+)", up.stdout).group(1)
        user, password = re.search(r"login:\s+(\S+) / (\S+)", up.stdout).groups()
        print(f"airflow.sh up in {time.monotonic() - started_at:.0f} s\n{up.stdout}")
        yield up.stdout, url, user, password
    finally:
        down = subprocess.run([str(script), "down"], env=env, capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stderr
        assert "airflow: stopped" in down.stdout
        left = [subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True).stdout.split()
                for path in (home, pg_home)]
        assert left == [[], []], f"processes left running after `airflow.sh down`: {left}"
        shutil.rmtree(pg_home, ignore_errors=True)
