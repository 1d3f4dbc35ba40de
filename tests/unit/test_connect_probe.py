"""scripts/connect.sh's readiness probe is bounded: something on the port that is no Spark Connect server (or one
not ready yet, which gRPC reports as UNAVAILABLE) fails the probe within seconds. pyspark's client alone retries
such a server for 10 minutes and more, which once held `make airflow`'s `up` past its own start timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wait_on_a_port_that_is_no_connect_server_fails_instead_of_retrying_for_minutes(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def refuse() -> None:  # accept and hang up at once: gRPC UNAVAILABLE, which pyspark retries
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONNECT_")}
    try:
        # no server of this checkout runs there (no pid file): one probe, then `wait` fails
        result = subprocess.run([str(ROOT / "scripts" / "connect.sh"), "wait"], capture_output=True, text=True,
                                env={**env, "CONNECT_PORT": str(port), "CONNECT_HOME": str(tmp_path),
                                     "CONNECT_START_TIMEOUT": "5"}, timeout=300)
    finally:
        listener.close()
    assert result.returncode != 0
    assert "connect" in result.stderr, result.stderr
