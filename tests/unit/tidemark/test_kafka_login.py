"""One refused login, one failure (tidemark.kafka.login): which connection failures are refusals, by type; the
kafka-python names the hooks rely on; and the transport fix that keeps the broker's last answer. The refused
logins themselves are counted in the brokers' logs by tests/integration/test_kafka_tls.py."""

from __future__ import annotations

import socket
import ssl

import pytest

from tidemark.kafka.login import LoginGuard, authentication_failure, broker_reason, read_to_the_end


def _raised_from(cause: BaseException, error: BaseException) -> BaseException:
    """``error`` as kafka-python raises a failed TLS handshake: inside ``except`` for the ssl error."""
    try:
        try:
            raise cause
        except BaseException:
            raise error  # noqa: B904 - the implicit context is what kafka-python leaves
    except BaseException as raised:
        return raised


def test_sasl_refusals_are_known_by_their_kafka_python_type():
    from kafka import errors

    refused = errors.SaslAuthenticationFailedError("SaslAuthenticationFailedError: Authentication failed during "
                                                   "authentication due to invalid credentials with SASL mechanism "
                                                   "SCRAM-SHA-512")
    assert authentication_failure(refused) is refused
    assert broker_reason(refused) == ("Authentication failed during authentication due to invalid credentials with "
                                      "SASL mechanism SCRAM-SHA-512")
    for other in (errors.UnsupportedSaslMechanismError(), errors.IllegalSaslStateError()):
        assert authentication_failure(other) is other
    assert broker_reason(errors.UnsupportedSaslMechanismError()) == \
        "The broker does not support the requested SASL mechanism."
    # a bare disconnect is a network fault, whatever its words: worth another try
    assert authentication_failure(errors.KafkaConnectionError("socket disconnected")) is None
    assert authentication_failure(errors.KafkaConnectionError("Authentication failed")) is None


def test_tls_failures_are_known_by_the_ssl_error_kafka_python_carries():
    from kafka.errors import KafkaConnectionError

    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    handshake = _raised_from(verify, KafkaConnectionError("Handshake failed: ..."))
    assert authentication_failure(handshake) is verify
    # a listener that does not speak TLS ends the handshake without a word: a refusal too, in the handshake
    eof = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert authentication_failure(_raised_from(eof, KafkaConnectionError("Handshake failed: ..."))) is eof
    # after the handshake kafka-python passes the ssl error as an argument: the peer's alert counts ...
    alert = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    assert authentication_failure(KafkaConnectionError(alert)) is alert
    # ... the end of the stream does not (a broker going away says that too), nor any other error
    assert authentication_failure(KafkaConnectionError(ssl.SSLEOFError(8, "EOF"))) is None
    assert authentication_failure(KafkaConnectionError(ConnectionResetError(104, "reset"))) is None


def test_the_guard_keeps_the_first_refusal_only():
    from kafka.errors import KafkaConnectionError, SaslAuthenticationFailedError

    guard = LoginGuard()
    guard.note(KafkaConnectionError("socket disconnected"))
    assert (guard.failure, guard.refusal) == (None, None)
    first, second = SaslAuthenticationFailedError("first"), SaslAuthenticationFailedError("second")
    guard.note(first)
    guard.note(second)
    assert guard.failure is first and guard.refusal is first
    guard.close()  # no client built: nothing to close


def test_the_kafka_python_names_the_hooks_rely_on_exist():
    """kafka-python is pinned below 4; a version that renames these would silently bring back the retries."""
    import inspect

    from kafka import KafkaConsumer
    from kafka.net.compat import KafkaNetClient
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

    assert "kafka_client" in KafkaConsumer.DEFAULT_CONFIG
    assert {"net", "manager"} <= set(inspect.signature(KafkaNetClient).parameters)
    assert inspect.iscoroutinefunction(KafkaConnectionManager._build_transport)
    assert callable(KafkaConnectionManager.get_connection)
    for transport in (KafkaTCPTransport, KafkaSSLTransport):
        assert callable(transport._sock_recv)


def test_the_guard_builds_a_client_whose_manager_refuses_to_connect_after_a_refusal():
    from kafka.errors import SaslAuthenticationFailedError

    guard = LoginGuard()
    client = guard.kafka_client(bootstrap_servers=["127.0.0.1:1"], client_id="t")
    try:
        guard.note(SaslAuthenticationFailedError("refused"))
        with pytest.raises(SaslAuthenticationFailedError, match="refused"):
            client._manager.get_connection("bootstrap-0")
        assert client._manager._conns == {}  # no connection opened
    finally:
        guard.close()


class _Connection:
    """The transport's protocol (kafka-python's KafkaConnection), as far as a read needs it."""

    _sensors = None

    def __init__(self) -> None:
        from kafka.future import Future

        self.received, self.lost = b"", Future()

    def data_received(self, data: bytes) -> None:
        self.received += data

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.success(exc)


@pytest.mark.parametrize("fixed", [False, True], ids=["kafka-python", "read_to_the_end"])
def test_the_bytes_read_with_the_end_of_the_stream_reach_the_connection(fixed):
    """The broker closes the connection right behind its answer to a refused login: kafka-python's transport
    drops the bytes read in the same read as the end of the stream; ``read_to_the_end`` passes them on first."""
    from kafka.net.selector import NetworkSelector
    from kafka.net.transport import KafkaTCPTransport

    ours, broker = socket.socketpair()
    ours.setblocking(False)
    broker.sendall(b"the broker's answer")
    broker.close()  # the end of the stream is there with the answer, for one read
    net = NetworkSelector()
    transport, connection = KafkaTCPTransport(net, ours, host="127.0.0.1"), _Connection()
    if fixed:
        read_to_the_end(transport)
    transport.set_protocol(connection)
    transport.resume_reading()
    try:
        net.poll(timeout_ms=5000, future=connection.lost)
        assert connection.lost.is_done  # the end of the stream still closes the connection
        assert connection.received == (b"the broker's answer" if fixed else b"")
    finally:
        net.close()
