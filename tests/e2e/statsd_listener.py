"""A StatsD receiver for the e2e tests: a UDP socket on 127.0.0.1 and a thread that keeps every line of
the packets it receives that match a prefix (Airflow's services send their own metrics too: the
kernel's buffer must not fill and drop Tidemark's)."""

from __future__ import annotations

import socket
import threading


class StatsdListener:
    def __init__(self, keep: str = "airflow.tidemark.") -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.5)
        self.port = self._socket.getsockname()[1]
        self._keep, self._lines, self._lock = keep, [], threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="statsd-listener", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stopped.is_set():
            try:
                packet = self._socket.recv(65535).decode(errors="replace")
            except TimeoutError:
                continue
            kept = [line for line in packet.splitlines() if line.startswith(self._keep)]
            with self._lock:
                self._lines += kept

    def lines(self) -> list[str]:
        """Every kept line so far, in the order received."""
        with self._lock:
            return list(self._lines)

    def values(self, name: str) -> list[str]:
        """The values received for ``name`` (the part between ``name:`` and ``|``), oldest first."""
        return [line[len(name) + 1:].split("|")[0] for line in self.lines() if line.startswith(f"{name}:")]

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._socket.close()
