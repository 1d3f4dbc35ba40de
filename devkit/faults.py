"""Fault injectors for the chaos tests and the chaos soak: an S3 endpoint that goes away at a chosen
request (``S3Gate``) and a Spark standalone worker killed -9 with its executors (``kill_spark_worker``).
A Kafka broker is killed with ``tests.kafka_cluster.Cluster.kill_broker`` (the three-broker cluster).

``S3Gate`` is a TCP gate in front of the local S3 server (scripts/storage.sh). Clients pointed at the
gate's endpoint see what clients of a durable S3-compatible server see while it restarts: live connections
dropped, new ones reset, and then the server answering again *with its data intact*. The local server
itself (moto) keeps its objects in memory and a real restart of it would empty the lake, which no real
S3 service does; the gate models the restart in front of it instead, so only the clients pointed at the
gate see the outage and the other tests sharing the server see nothing.

The outage can be made to land on one request: ``trip_on(pattern)`` watches the client's bytes for an HTTP
request line matching ``pattern`` (a Delta commit: ``PUT .../_delta_log/<20 digits>.json``) and then

* ``lose="response"``: lets the request reach the server, which applies it, and drops the connection
  before the answer reaches the client (the server died after writing, before answering: the client
  cannot know whether its commit happened), then goes down;
* ``lose="request"``: drops the connection before the request reaches the server, then goes down.

``on_request(pattern, action)`` instead runs ``action`` when such a request arrives, holding the request
until it returns: another fault lands exactly there (a Kafka broker killed as the plan's ledger commit
freezes a batch, say), the server seeing nothing unusual.

Down, the gate resets every connection it accepts; it comes back by itself after ``down_for`` refused
connections (counted, not timed: no sleep decides the length of the outage), or on ``up()``.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

_REQUEST_LINE = re.compile(rb"(?:GET|PUT|POST|DELETE|HEAD) /[^ \r\n]*")


def _drop(sock: socket.socket) -> None:
    """Close with a reset, waking any thread blocked on the socket."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _Link:
    """One client connection and its connection to the server, pumped both ways by two threads."""

    def __init__(self, gate: S3Gate, client: socket.socket, server: socket.socket) -> None:
        self.gate, self.client, self.server = gate, client, server
        self.swallow = False  # the tripped request was forwarded: its answer must not reach the client
        self.down_for: int | None = None  # then the gate goes down for this many connections

    def start(self) -> None:
        for pump in (self._requests, self._answers):
            threading.Thread(target=pump, daemon=True).start()

    def drop(self) -> None:
        _drop(self.client)
        _drop(self.server)

    def _requests(self) -> None:
        tail = b""
        try:
            while data := self.client.recv(65536):
                window = tail + data
                if self.gate.tripped_by(window, self) == "request":
                    return
                self.server.sendall(data)
                tail = window[window.rfind(b"\n") + 1:][-1024:]  # a request line split across reads
        except OSError:
            pass
        finally:
            self.gate.forget(self)

    def _answers(self) -> None:
        try:
            while data := self.server.recv(65536):
                if self.swallow:
                    if data.startswith(b"HTTP/1.1 100"):  # Expect: 100-continue: the body is still to come
                        end = data.find(b"\r\n\r\n") + 4
                        self.client.sendall(data[:end])
                        data = data[end:]
                        if not data:
                            continue
                    self.gate.down(self.down_for)  # the server answered: it applied the request
                    return
                self.client.sendall(data)
        except OSError:
            pass
        finally:
            self.gate.forget(self)


class S3Gate:
    """A TCP gate on 127.0.0.1 in front of ``upstream`` (default: the local S3 server of this run). Use
    ``endpoint`` as the ``endpoint_url`` of the clients that are to see the outage."""

    def __init__(self, upstream: tuple[str, int] | None = None, port: int = 0) -> None:
        self.upstream = upstream or ("127.0.0.1", int(os.environ.get("S3_PORT", "9000")))
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._down = False
        self._down_left: int | None = None
        self._trips: list[tuple[re.Pattern, str, int | None, Callable[[], object] | None]] = []
        self.tripped: list[str] = []  # the request lines the gate went down on
        self.refused = 0  # connections reset while down
        self.errors: list[Exception] = []  # what on_request's actions raised
        self.outages = 0
        self._closed = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_down(self) -> bool:
        return self._down

    def __enter__(self) -> S3Gate:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        _drop(self._listener)
        for link in list(self._links):
            link.drop()

    def trip_on(self, pattern: str, lose: str = "response", down_for: int | None = None) -> None:
        """Go down at the next request whose request line matches ``pattern`` (a regex over
        ``METHOD /path``), losing its ``response`` or its ``request``; come back after ``down_for``
        refused connections (None: on ``up()``). Several trips may be armed: each fires once, in the
        order they were armed (a later one only watches the requests after the earlier one fired)."""
        if lose not in ("response", "request"):
            raise ValueError(f"lose must be 'response' or 'request', not {lose!r}")
        with self._lock:
            self._trips.append((re.compile(pattern.encode()), lose, down_for, None))

    def on_request(self, pattern: str, action: Callable[[], object]) -> None:
        """Run ``action`` when the next request matching ``pattern`` arrives, before forwarding it (the
        request waits); armed in the same order as the trips."""
        with self._lock:
            self._trips.append((re.compile(pattern.encode()), "hook", None, action))

    def down(self, down_for: int | None = None) -> None:
        """The server goes away now: every live connection is dropped, new ones are reset until
        ``down_for`` of them were (None: until ``up()``)."""
        with self._lock:
            self._down, self._down_left = True, down_for
            self.outages += 1
            links, self._links = list(self._links), set()
        for link in links:
            link.drop()

    def up(self) -> None:
        with self._lock:
            self._down, self._down_left = False, None

    def tripped_by(self, window: bytes, link: _Link) -> str | None:
        """Called by a link with its latest client bytes: the trip's mode when they hold the armed
        request (``request`` mode has then already gone down; ``response`` mode swallows its answer)."""
        if not self._trips:
            return None
        lines = [m.group(0) for m in _REQUEST_LINE.finditer(window)]
        with self._lock:
            line = next((line for line in lines if self._trips and self._trips[0][0].search(line)), None)
            if line is None:
                return None
            _, lose, down_for, action = self._trips.pop(0)
            self.tripped.append(line.decode(errors="replace"))
        if action is not None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - kept for the test to report; the request goes on
                self.errors.append(exc)
            return None
        if lose == "request":
            self.down(down_for)
        else:
            link.swallow, link.down_for = True, down_for
        return lose

    def forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)
        link.drop()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._down
                if refuse:
                    self.refused += 1
                    if self._down_left is not None:
                        self._down_left -= 1
                        if self._down_left <= 0:
                            self._down, self._down_left = False, None
            if refuse:
                _drop(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                _drop(client)
                continue
            link = _Link(self, client, server)
            with self._lock:
                self._links.add(link)
            link.start()


def session_processes(pidfile: Path) -> list[psutil.Process]:
    """Every process of the session whose leader's pid is in ``pidfile`` (none when the file is missing or
    stale): a service started in a session of its own with everything it started since."""
    try:
        leader = int(Path(pidfile).read_text())
    except (OSError, ValueError):
        return []
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == leader:
                found.append(process)
        except (ProcessLookupError, PermissionError):
            pass
    return found


def spark_worker_processes(work: Path, worker: int) -> list[psutil.Process]:
    """The processes of worker ``worker`` of a standalone cluster started by scripts/spark_cluster.sh with
    SPARK_CLUSTER_HOME ``work``: the worker's JVM (a session of its own) and the executors it started."""
    return session_processes(Path(work) / f"worker-{worker}.pid")


def spark_executors(work: Path, worker: int) -> list[psutil.Process]:
    """The executor JVMs worker ``worker`` runs now."""
    executors = []
    for process in spark_worker_processes(work, worker):
        try:
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in process.cmdline():
                executors.append(process)
        except psutil.NoSuchProcess:
            pass
    return executors


def kill_spark_worker(work: Path, worker: int, timeout: float = 30) -> list[int]:
    """kill -9 of a standalone worker and every executor it runs, as when its host dies. Returns the pids
    killed; raises if any is still alive after ``timeout`` seconds."""
    processes = spark_worker_processes(work, worker)
    if not processes:
        raise RuntimeError(f"Spark worker {worker} of the cluster in {work} runs no process (see its "
                           f"worker-{worker}.log); nothing to kill")
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    if alive:
        raise RuntimeError(f"Spark worker {worker} ({work}): processes {[p.pid for p in alive]} survived kill -9")
    return [p.pid for p in processes]
