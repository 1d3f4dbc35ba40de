"""The kafka-python adapter: partitions and offsets, nothing else. Built from Kafka client
properties under Kafka's own dotted names (``bootstrap.servers``, ``security.protocol``, ...)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from tidemark.errors import ConfigError, KafkaUnavailableError, UnknownTopicError
from tidemark.offsets import TopicPartition

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"([^"]*)"')

# Kafka property -> kafka-python keyword argument.
_DIRECT = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "ssl.cafile": "ssl_cafile",
    "ssl.certfile": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.password": "ssl_password",
    "ssl.check.hostname": "ssl_check_hostname",
    "client.id": "client_id",
    "request.timeout.ms": "request_timeout_ms",
}


def client_kwargs(properties: Mapping[str, str]) -> dict:
    """Translate Kafka client properties to kafka-python keyword arguments. SASL credentials in
    ``sasl.jaas.config`` become ``sasl_plain_username`` / ``sasl_plain_password``."""
    kwargs: dict = {}
    for key, value in properties.items():
        if key in _DIRECT:
            kwargs[_DIRECT[key]] = value
        elif key == "sasl.jaas.config":
            options = dict(_JAAS_OPTION.findall(value))
            if "username" in options:
                kwargs["sasl_plain_username"] = options["username"]
            if "password" in options:
                kwargs["sasl_plain_password"] = options["password"]
    if "bootstrap_servers" not in kwargs:
        raise KafkaUnavailableError("the Kafka connection has no 'bootstrap.servers' in its extra")
    kwargs["bootstrap_servers"] = [s.strip() for s in str(kwargs["bootstrap_servers"]).split(",")]
    for key in ("request_timeout_ms",):
        if key in kwargs:
            kwargs[key] = int(kwargs[key])
    return kwargs


def quiet_kafka_logging() -> None:
    """kafka-python logs every connection at INFO; keep task logs and the CLI about Tidemark."""
    logging.getLogger("kafka").setLevel(logging.WARNING)


class KafkaOffsets:
    """Reads partitions and offsets with a group-less consumer (no group join, no commits)."""

    def __init__(self, properties: Mapping[str, str], *, isolation_level: str = "read_committed",
                 timeout_ms: int = 15000, pipeline: str | None = None) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConfigurationError, KafkaError

        quiet_kafka_logging()
        self._pipeline = pipeline
        self._timeout_ms = timeout_ms
        kwargs = client_kwargs(properties)
        kwargs.setdefault("request_timeout_ms", timeout_ms)
        kwargs.setdefault("bootstrap_timeout_ms", timeout_ms)
        servers = ",".join(kwargs["bootstrap_servers"])
        try:
            self._consumer = KafkaConsumer(
                isolation_level=isolation_level,
                enable_auto_commit=False,
                **kwargs,
            )
        except KafkaConfigurationError as exc:
            raise ConfigError(f"the Kafka connection's properties are not valid: {exc}",
                              pipeline=pipeline) from None
        except KafkaError as exc:
            raise KafkaUnavailableError(
                f"cannot reach Kafka at {servers} within {timeout_ms} ms ({type(exc).__name__}: {exc}); "
                f"check the Kafka connection and that the brokers are up. Nothing was read or committed.",
                pipeline=pipeline,
            ) from None

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of the topics; UnknownTopicError if one does not exist."""
        topics = list(topics)
        known = self._consumer.topics()
        missing = [t for t in topics if t not in known]
        if missing:
            raise UnknownTopicError(
                f"topic(s) {', '.join(missing)} do not exist on the Kafka cluster; create them or fix "
                f"'topics' in the pipeline file", pipeline=self._pipeline)
        result = []
        for topic in topics:
            for p in sorted(self._consumer.partitions_for_topic(topic) or ()):
                result.append(TopicPartition(topic, p))
        return result

    def _call(self, what: str, fn, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaError

        try:
            answer = fn([KTP(tp.topic, tp.partition) for tp in tps])
        except KafkaError as exc:
            raise KafkaUnavailableError(
                f"Kafka did not return the {what} offsets of {', '.join(map(str, tps))} "
                f"({type(exc).__name__}: {exc}); nothing was read or committed", pipeline=self._pipeline
            ) from None
        return {TopicPartition(k.topic, k.partition): v for k, v in answer.items()}

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._call("earliest", self._consumer.beginning_offsets, tps)

    def offsets_for_time(self, tps: list[TopicPartition], when_ms: int) -> dict[TopicPartition, int | None]:
        """Per partition, the earliest offset whose timestamp is at or after ``when_ms``; None
        when no record is that new."""
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaError

        try:
            answer = self._consumer.offsets_for_times({KTP(tp.topic, tp.partition): when_ms for tp in tps})
        except KafkaError as exc:
            raise KafkaUnavailableError(f"Kafka did not answer offsets_for_times ({type(exc).__name__}: {exc})",
                                        pipeline=self._pipeline) from None
        return {TopicPartition(k.topic, k.partition): (v.offset if v is not None else None) for k, v in answer.items()}

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Latest offsets; under ``read_committed`` the last stable offset."""
        return self._call("latest", self._consumer.end_offsets, tps)


def commit_group_offsets(properties: Mapping[str, str], group: str, offsets: Mapping[TopicPartition, int],
                         metadata: Mapping[TopicPartition, str], timeout_ms: int = 15000) -> None:
    """Commit offsets to a Kafka consumer group without joining it (a "simple" consumer commit),
    so that kafka-consumer-groups and lag monitors see them. Raises kafka-python's errors."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    quiet_kafka_logging()
    kwargs = {"request_timeout_ms": timeout_ms, "bootstrap_timeout_ms": timeout_ms, **client_kwargs(properties)}
    consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, **kwargs)
    try:
        consumer.commit({KTP(tp.topic, tp.partition): OffsetAndMetadata(offset, metadata.get(tp, ""), -1)
                         for tp, offset in offsets.items()}, timeout_ms=timeout_ms)
    finally:
        consumer.close()
