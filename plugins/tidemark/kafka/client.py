"""The kafka-python adapter: partitions and offsets, nothing else. Built from Kafka client
properties under Kafka's own dotted names (``bootstrap.servers``, ``security.protocol``, ...)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping

from tidemark.errors import ConfigError, KafkaAuthenticationError, KafkaUnavailableError, UnknownTopicError
from tidemark.kafka import tls
from tidemark.kafka.login import LoginGuard, broker_reason, is_sasl
from tidemark.kafka.offsets import TopicPartition

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
# Properties (and JAAS options) whose values are credentials.
_SECRET_NAME = re.compile(r"password|secret|jaas|token|credential|keystore\.key", re.IGNORECASE)

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
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
}
_INTEGER_KWARGS = ("request_timeout_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms")


def _jaas_options(jaas: str) -> dict[str, str]:
    return {name: re.sub(r"\\(.)", r"\1", value) for name, value in _JAAS_OPTION.findall(jaas)}


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def java_client_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties as Kafka's Java client (Spark's Kafka source) takes them. The spelling of
    Airflow's Kafka provider (librdkafka) works too: ``sasl.mechanisms`` is ``sasl.mechanism``, and
    ``sasl.username`` / ``sasl.password`` become a ``sasl.jaas.config`` for PLAIN or SCRAM. Over TLS,
    the CA, client certificate and key become PEM text (``tidemark.kafka.tls``): paths are read here."""
    return tls.java_tls_properties(_sasl_properties(properties))


def _sasl_properties(properties: Mapping[str, str]) -> dict[str, str]:
    props = {key: str(value) for key, value in properties.items()}
    if "sasl.mechanisms" in props:
        mechanisms = props.pop("sasl.mechanisms")
        props.setdefault("sasl.mechanism", mechanisms)
    user, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    if user is not None and password is not None and "sasl.jaas.config" not in props:
        mechanism = props.get("sasl.mechanism", "").upper()
        if mechanism not in _JAAS_MODULES:
            raise ConfigError(f"the Kafka connection has sasl.username and sasl.password but sasl.mechanism is "
                              f"'{mechanism or 'unset'}'; set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, or give "
                              f"a sasl.jaas.config")
        props["sasl.jaas.config"] = (f'{_JAAS_MODULES[mechanism]} required username="{_jaas_quote(user)}" '
                                     f'password="{_jaas_quote(password)}";')
    return props


def secret_values(properties: Mapping[str, str]) -> list[str]:
    """Every credential in the properties: values of password/secret/JAAS/token properties, the
    secret options inside a JAAS config, and the client's private key (inline, or read from its file
    if readable here; also line by line). For masking, and for checking that none leaks."""
    found: list[str] = []
    for key, value in _sasl_properties(properties).items():
        if not _SECRET_NAME.search(key) or not value:
            continue
        found.append(value)
        if key == "sasl.jaas.config":
            found += [v for name, v in _jaas_options(value).items() if _SECRET_NAME.search(name) and v]
    for key in ("sasl.password",):  # the original spelling, before it became a JAAS config
        if properties.get(key):
            found.append(str(properties[key]))
    found += tls.key_secrets(properties)
    return list(dict.fromkeys(found))


def client_kwargs(properties: Mapping[str, str]) -> dict:
    """Translate Kafka client properties to kafka-python keyword arguments. SASL credentials in
    ``sasl.jaas.config`` (or ``sasl.username`` / ``sasl.password``) become ``sasl_plain_username`` /
    ``sasl_plain_password``. Over TLS, one ``ssl_context`` carries the CA, the client certificate and
    hostname verification (``tidemark.kafka.tls.ssl_context``)."""
    kwargs: dict = {}
    for key, value in _sasl_properties(properties).items():
        if key in _DIRECT:
            kwargs[_DIRECT[key]] = value
        elif key == "sasl.jaas.config":
            options = _jaas_options(value)
            mechanism = str(properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "").upper()
            if mechanism in _JAAS_MODULES and not {"username", "password"} <= set(options):
                raise ConfigError(f"the Kafka connection's sasl.jaas.config has no username=\"...\" and "
                                  f"password=\"...\" for {mechanism} (each value in double quotes, the whole ending "
                                  f"with ';', e.g. {_JAAS_MODULES[mechanism]} required username=\"u\" "
                                  f"password=\"p\";)")
            if "username" in options:
                kwargs["sasl_plain_username"] = options["username"]
            if "password" in options:
                kwargs["sasl_plain_password"] = options["password"]
    if "bootstrap_servers" not in kwargs:
        raise KafkaUnavailableError("the Kafka connection has no 'bootstrap.servers' in its extra")
    kwargs["bootstrap_servers"] = [s.strip() for s in str(kwargs["bootstrap_servers"]).split(",")]
    for key in _INTEGER_KWARGS:
        if key in kwargs:
            try:
                kwargs[key] = int(kwargs[key])
            except ValueError:
                raise ConfigError(f"the Kafka connection's {key.replace('_', '.')} is '{kwargs[key]}', not a whole "
                                  f"number (milliseconds or bytes, as Kafka's own setting)") from None
    if tls.uses_tls(properties):
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname"):
            kwargs.pop(key, None)
        kwargs["ssl_context"] = tls.ssl_context(properties)
    return kwargs


def quiet_kafka_logging() -> None:
    """kafka-python logs every connection at INFO; keep task logs and the CLI about Tidemark."""
    logging.getLogger("kafka").setLevel(logging.WARNING)


def authentication_error(servers: str, failure: str, pipeline: str | None = None) -> KafkaAuthenticationError:
    return KafkaAuthenticationError(
        f"Kafka at {servers} refused the credentials of the Kafka connection ({failure}); check the user and "
        f"password in its sasl.jaas.config (or sasl.username / sasl.password) and its sasl.mechanism. "
        f"Nothing was read or committed.", pipeline=pipeline)


def tls_error(properties: Mapping[str, str], failure: str, pipeline: str | None = None) -> KafkaAuthenticationError:
    return KafkaAuthenticationError(f"TLS with {tls.listener(properties)} failed: {failure}. Nothing was "
                                    f"read or committed.", pipeline=pipeline)


def refusal_error(properties: Mapping[str, str], servers: str, refusal: BaseException,
                  pipeline: str | None = None) -> KafkaAuthenticationError:
    """The terminal error for a refused login or TLS handshake (``tidemark.kafka.login.authentication_failure``)."""
    from kafka.errors import IllegalSaslStateError, UnsupportedSaslMechanismError

    if isinstance(refusal, UnsupportedSaslMechanismError):
        mechanism = _sasl_properties(properties).get("sasl.mechanism", "unset")
        return KafkaAuthenticationError(
            f"Kafka at {servers} does not offer the Kafka connection's sasl.mechanism {mechanism} on this listener "
            f"({broker_reason(refusal)}); set one the listener enables. Nothing was read or committed.",
            pipeline=pipeline)
    if isinstance(refusal, IllegalSaslStateError):
        return KafkaAuthenticationError(
            f"Kafka at {servers} did not expect a SASL login ({broker_reason(refusal)}): is it a SASL listener? "
            f"Check the Kafka connection's bootstrap.servers and security.protocol. Nothing was read or committed.",
            pipeline=pipeline)
    if is_sasl(refusal):
        return authentication_error(servers, f"SASL authentication failed: {broker_reason(refusal)}", pipeline)
    described = tls.handshake_failure(str(refusal), tls.has_client_certificate(properties))
    return tls_error(properties, described or f"the TLS handshake failed ({refusal})", pipeline)


class KafkaOffsets:
    """Reads partitions and offsets with a group-less consumer (no group join, no commits)."""

    def __init__(self, properties: Mapping[str, str], *, isolation_level: str = "read_committed",
                 timeout_ms: int = 15000, pipeline: str | None = None) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConfigurationError, KafkaError

        quiet_kafka_logging()
        self._pipeline = pipeline
        self._timeout_ms = timeout_ms
        try:
            kwargs = client_kwargs(properties)
        except ConfigError as exc:
            raise ConfigError(str(exc), pipeline=pipeline) from None
        kwargs.setdefault("request_timeout_ms", timeout_ms)
        # The Java client's default (kafka-python's is 30 s): an unreachable broker is tried again within the timeout.
        kwargs.setdefault("reconnect_backoff_max_ms", 1000)
        kwargs["bootstrap_timeout_ms"] = timeout_ms
        self._properties, self._servers = properties, ",".join(kwargs["bootstrap_servers"])
        # A refused SASL login or TLS handshake ends the bootstrap at once, with kafka-python's client closed
        # before it reconnects: the broker sees one refused login per attempt (tidemark.kafka.login).
        self._guard = LoginGuard()
        try:
            self._consumer = KafkaConsumer(isolation_level=isolation_level, enable_auto_commit=False,
                                           kafka_client=self._guard.kafka_client, **kwargs)
        except KafkaConfigurationError as exc:
            self._guard.close()
            raise ConfigError(f"the Kafka connection's properties are not valid: {exc}", pipeline=pipeline) from None
        except KafkaError as exc:
            self._guard.close()
            self._raise_if_refused()
            sasl = str(kwargs.get("security_protocol", "")).startswith("SASL")
            raise KafkaUnavailableError(
                f"cannot reach Kafka at {self._servers} within {timeout_ms} ms ({type(exc).__name__}: {exc}); "
                f"check the Kafka connection{' (and its SASL credentials)' if sasl else ''} and that the "
                f"brokers are up. Nothing was read or committed.",
                pipeline=pipeline,
            ) from None
        except BaseException:
            self._guard.close()
            raise

    def _raise_if_refused(self) -> None:
        """The broker refused the login, or the TLS handshake failed: a terminal error, said once."""
        refusal = getattr(self, "_guard", None) and self._guard.refusal
        if refusal is not None:
            raise refusal_error(self._properties, self._servers, refusal, self._pipeline) from None

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaOffsets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _topics(self) -> set[str]:
        """The cluster's topics (a full metadata refresh). A broker that died since the bootstrap may be
        the one kafka-python asks: it raises a connection error, and the next try goes to another broker;
        within the pipeline's timeout, then KafkaUnavailableError (transient: nothing was frozen)."""
        from kafka.errors import KafkaError

        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            try:
                return set(self._consumer.topics())
            except KafkaError as exc:
                self._raise_if_refused()  # no new login after a refusal: the client opens no connection
                if time.monotonic() < deadline:
                    time.sleep(0.2)  # let the client mark the broker down before it picks another
                    continue
                raise KafkaUnavailableError(
                    f"Kafka did not return the cluster's metadata within {self._timeout_ms} ms ({type(exc).__name__}: "
                    f"{exc}); nothing was read or committed", pipeline=self._pipeline) from None

    def topic_names(self) -> set[str]:
        """Every topic the cluster has (for ``topic_pattern`` pipelines)."""
        return self._topics()

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of the topics; UnknownTopicError if one does not exist."""
        topics = list(topics)
        known = self._topics()
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

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Kafka's topic id (KIP-516) per topic, from the consumer's cluster metadata: kafka-python
        3.x sends Metadata v10+ to brokers that support it and keeps the ids
        (``ClusterMetadata.topic_id``). A topic deleted and recreated under the same name gets a new
        id. Topics without a known id (an older broker) are left out; the metadata is refreshed once."""
        cluster = self._consumer._client.cluster  # kafka-python keeps the ids on the client's cluster metadata
        topics = list(topics)
        if any(cluster.topic_id(t) is None for t in topics):
            self._topics()  # a full metadata refresh
        ids = {}
        for topic in topics:
            topic_id = cluster.topic_id(topic)
            if topic_id is not None and getattr(topic_id, "int", 1) != 0:  # the zero UUID means "no id"
                ids[topic] = str(topic_id)
        return ids

    def _call(self, what: str, fn, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaError

        try:
            answer = fn([KTP(tp.topic, tp.partition) for tp in tps])
        except KafkaError as exc:
            self._raise_if_refused()
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

    def records(self, tp: TopicPartition, start: int, end: int) -> Iterator:
        """The records of ``tp`` at offsets ``start`` to ``end - 1``, in order: a plan-time look into a range (a
        Debezium table's keys and columns). Raises KafkaUnavailableError when ``end`` is not reached in time."""
        from kafka import TopicPartition as KafkaPartition

        partition = KafkaPartition(tp.topic, tp.partition)
        self._consumer.assign([partition])
        self._consumer.seek(partition, start)
        deadline = time.monotonic() + self._timeout_ms / 1000
        while self._consumer.position(partition) < end:
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(f"the records of {tp.topic} partition {tp.partition} in offsets [{start}, "
                                            f"{end}) were not read within {self._timeout_ms} ms; nothing was frozen",
                                            pipeline=self._pipeline)
            yield from (r for r in self._consumer.poll(timeout_ms=200).get(partition, []) if start <= r.offset < end)

    def newest_value(self, tp: TopicPartition, start: int, end: int, window: int = 64):
        """The last record of ``tp`` in ``[start, end)`` whose value is not null (None: all are tombstones), read
        back from ``end`` a window at a time."""
        while end > start:
            found = None
            for record in self.records(tp, max(start, end - window), end):
                found = record if record.value is not None else found
            if found is not None:
                return found
            end = max(start, end - window)
        return None

    def high_watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Per partition, the high watermark: the end offset under ``read_uncommitted``, whatever this
        reader's isolation level. Under ``read_committed`` the records between the last stable offset
        (``latest``) and the high watermark are held back by open transactions. One ListOffsets
        request on this consumer's connection, bounded by its request timeout."""
        from kafka.protocol.consumer import IsolationLevel

        fetcher = self._consumer._fetcher  # kafka-python has no per-call isolation level; its fetcher holds it
        saved = fetcher._isolation_level
        fetcher._isolation_level = IsolationLevel.READ_UNCOMMITTED
        try:
            return self._call("high-watermark", self._consumer.end_offsets, tps)
        finally:
            fetcher._isolation_level = saved


def commit_group_offsets(properties: Mapping[str, str], group: str, offsets: Mapping[TopicPartition, int],
                         metadata: Mapping[TopicPartition, str], timeout_ms: int = 15000) -> None:
    """Commit offsets to a Kafka consumer group without joining it (a "simple" consumer commit),
    so that kafka-consumer-groups and lag monitors see them. Raises kafka-python's errors."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    quiet_kafka_logging()
    kwargs = {"request_timeout_ms": timeout_ms, "bootstrap_timeout_ms": timeout_ms, **client_kwargs(properties)}
    guard = LoginGuard()  # a refused login ends the bootstrap at once (tidemark.kafka.login)
    try:
        consumer = KafkaConsumer(group_id=group, enable_auto_commit=False, kafka_client=guard.kafka_client, **kwargs)
    except BaseException:
        guard.close()
        raise
    try:
        consumer.commit({KTP(tp.topic, tp.partition): OffsetAndMetadata(offset, metadata.get(tp, ""), -1)
                         for tp, offset in offsets.items()}, timeout_ms=timeout_ms)
    finally:
        consumer.close()
