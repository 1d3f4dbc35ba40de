"""The three-broker TLS cluster of `scripts/kafka_cluster.sh` for tests: started once (a file lock keeps two
pytest-xdist workers from starting it twice; a running cluster is left as it is), its bootstrap servers and
PEM files, and Kafka connections for each listener kind under Kafka's own property names.

Tests share the cluster: each holds it in shared use while it runs (``in_use``, taken by the kafka_cluster
fixture), and a test that kills a broker takes it for itself (``alone``) until the broker is back, so that
no test of the other pytest-xdist worker sees two brokers where it expects three."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "kafka_cluster.sh"
_use_lock: list[int] = []  # this process's open lock file while a test holds the cluster


@dataclass(frozen=True)
class Cluster:
    env: dict[str, str]  # scripts/kafka_cluster.sh env: KAFKA_CLUSTER_<KIND> and the files

    def bootstrap(self, kind: str) -> str:
        return self.env[f"KAFKA_CLUSTER_{kind.upper()}"]

    def pem(self, name: str) -> str:
        """The path of a file the script made: CA, CLIENT_CERT, CLIENT_KEY, UNTRUSTED_CA, EXPIRED_CERT, ..."""
        return self.env[f"KAFKA_CLUSTER_{name.upper()}"]

    def text(self, name: str) -> str:
        return Path(self.pem(name)).read_text()

    def sasl_password(self) -> str:
        return Path(self.env["KAFKA_CLUSTER_SASL_PASSWORD_FILE"]).read_text().strip()

    def connection(self, kind: str, inline: bool) -> dict[str, str]:
        """The Kafka connection's extra for a listener kind (ssl, mtls, sasl_ssl): the CA and the client's
        certificate and key as PEM text (``inline``) or as paths."""
        protocol = "SASL_SSL" if kind == "sasl_ssl" else "SSL"
        props = {"bootstrap.servers": self.bootstrap(kind), "security.protocol": protocol}
        if inline:
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": self.text("ca")})
        else:
            props["ssl.cafile"] = self.pem("ca")
        if kind == "mtls" and inline:
            props.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": self.text("client_cert"),
                          "ssl.keystore.key": self.text("client_key")})
        elif kind == "mtls":
            props.update({"ssl.certfile": self.pem("client_cert"), "ssl.keyfile": self.pem("client_key")})
        if kind == "sasl_ssl":
            props.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": self.env["KAFKA_CLUSTER_SASL_USER"],
                          "sasl.password": self.sasl_password()})
        return props

    def create_topic(self, name: str, partitions: int = 3, configs: dict[str, str] | None = None,
                     replicas: list[int] | None = None) -> str:
        """A topic replicated on all three brokers (min.insync.replicas=2 is the cluster's default).
        ``replicas``: one partition on these brokers (node ids), the first its leader."""
        from kafka.admin import NewTopic

        topic = (NewTopic(name, partitions, 3, topic_configs=configs or {}) if replicas is None else
                 NewTopic(name, -1, -1, replica_assignments={0: replicas}, topic_configs=configs or {}))
        with self.admin() as admin:
            admin.create_topics([topic])
        return name

    @contextlib.contextmanager
    def admin(self):
        """An admin client bootstrapped from all three brokers: kafka-python (3.x) moves past one that
        refuses the connection, as a killed broker's does. Tried one at a time, a dead first broker cost
        its 30 s bootstrap timeout on each call (90 s of one failover test)."""
        from kafka.admin import KafkaAdminClient

        client = KafkaAdminClient(bootstrap_servers=self.bootstrap("plaintext").split(","), request_timeout_ms=10000)
        try:
            yield client
        finally:
            client.close()

    def partition_state(self, topic: str, partition: int = 0) -> dict:
        """The partition's metadata as the cluster sees it now: leader (a broker's node id, 1..3; -1: none)
        and replicas and isr (node ids)."""
        with self.admin() as admin:
            described = admin.describe_topics([topic])[0]
        found = [p for p in described["partitions"] if p["partition_index"] == partition]
        assert found, f"topic {topic} has no partition {partition}: {described}"
        return {"leader": found[0]["leader_id"], "replicas": sorted(found[0]["replica_nodes"]),
                "isr": sorted(found[0]["isr_nodes"])}

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.partition_state(topic, partition)["leader"]

    def kill_broker(self, node: int) -> None:
        """kill -9 broker ``node`` (its node id is its number); hold the cluster ``alone`` around this."""
        assert _use_lock, "kill a broker only inside Cluster.alone(): other tests share the cluster"
        _script("kill-broker", str(node))

    def start_broker(self, node: int) -> None:
        """Start broker ``node`` again and wait until all three are in the cluster's metadata."""
        _script("start-broker", str(node))
        _script("wait")

    @contextlib.contextmanager
    def in_use(self) -> Iterator[Cluster]:
        """Shared use by one test: waits while another test has killed a broker."""
        handle = os.open(ROOT / ".cache" / f"kafka-cluster-use-{self.bootstrap('plaintext').split(':')[1]}.lock",
                         os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_SH)
            _use_lock.append(handle)
            yield self
        finally:
            _use_lock.remove(handle)
            os.close(handle)  # releases the lock

    @contextlib.contextmanager
    def alone(self) -> Iterator[Cluster]:
        """The cluster to this test only (it may kill and restart brokers): waits until the tests of the
        other pytest-xdist worker that use the cluster are done, keeps new ones waiting, and gives the
        cluster back with all three brokers up."""
        assert _use_lock, "Cluster.alone() inside a test holding the kafka_cluster fixture"
        fcntl.flock(_use_lock[-1], fcntl.LOCK_EX)  # converts this test's shared lock
        try:
            yield self
        finally:
            _script("up")  # idempotent: starts any broker a failed test left down
            fcntl.flock(_use_lock[-1], fcntl.LOCK_SH)

    def produce(self, topic: str, count: int) -> list[bytes]:
        """``count`` JSON values round-robin over the partitions, acknowledged by all in-sync replicas."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap("plaintext"), acks="all")
        partitions = sorted(producer.partitions_for(topic))
        values = [json.dumps({"order_id": i, "topic": topic}).encode() for i in range(count)]
        for i, value in enumerate(values):
            producer.send(topic, key=f"k{i}".encode(), value=value, partition=partitions[i % len(partitions)])
        producer.flush()
        producer.close()
        return values


def _script(*args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kafka_cluster.sh {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def ensure_cluster() -> Cluster:
    """Start the cluster unless it runs (`scripts/kafka_cluster.sh up` is idempotent), under a lock."""
    lock = ROOT / ".cache" / "kafka-cluster.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _script("up")
    env = dict(line.split("=", 1) for line in _script("env").splitlines() if "=" in line)
    return Cluster(env=env)
