"""The three-broker TLS cluster of `scripts/kafka_cluster.sh` for tests: started once (a file lock keeps two
pytest-xdist workers from starting it twice; a running cluster is left as it is), its bootstrap servers and
PEM files, and Kafka connections for each listener kind under Kafka's own property names."""

from __future__ import annotations

import fcntl
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "kafka_cluster.sh"


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

    def create_topic(self, name: str, partitions: int = 3) -> str:
        """A topic replicated on all three brokers (min.insync.replicas=2 is the cluster's default)."""
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap("plaintext"))
        try:
            admin.create_topics([NewTopic(name, partitions, 3)])
        finally:
            admin.close()
        return name

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
