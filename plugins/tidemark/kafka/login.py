"""One refused login, one failure: a kafka-python client that stops at the first refused SASL login or failed
TLS handshake, as Kafka's Java client does, instead of logging in again and again until its timeout.

kafka-python 3.0 (read and measured on 3.0.12) reconnects after a refusal. Its bootstrap tries the next server,
and the same ones again, until ``bootstrap_timeout_ms``: the refusal it means to keep (the manager's
``_auth_failures``, raised by ``get_connection``) is recorded only when a connection's start-up raises, and
start-up never raises (the failure goes to the connection's ``init_future``). And the broker answers a refused
login late (``connection.failed.authentication.delay.ms``, 100 ms) and closes the connection right behind its
answer: kafka-python's transport drops the bytes of a read that also meets the end of the stream
(``_read_from_sock``), so about half of the refusals reached it as a bare ``socket disconnected``, retried like a
network fault. A wrong password cost 3 to 22 refused logins per plan attempt.

``LoginGuard`` fixes both on the one client it builds (KafkaConsumer's documented ``tidemark.kafka.client`` option;
nothing is patched globally):

- its connection manager watches every connection's ``init_future`` and keeps the first *authentication*
  failure, decided on exception types (``authentication_failure``); from then on it opens no connection and
  raises that failure instead, which ends kafka-python's bootstrap at once (its loop catches only
  ``NodeNotReadyError`` around ``get_connection``). ``close()`` then stops the client and its IO thread, which
  a KafkaConsumer whose constructor raised leaves running;
- each transport it builds hands the bytes it read to the connection before it reports the end of the stream
  (the next read meets the closed socket again), so the broker's answer arrives as
  ``SaslAuthenticationFailedError`` with the broker's reason.

The hooks touch two private names of kafka-python (``KafkaConnectionManager._build_transport`` and the
transports' ``_sock_recv``); ``tests/unit/tidemark/test_kafka_login.py`` fails if either goes away, and the
refused logins are counted in the broker's log by ``tests/integration/test_kafka_tls.py``."""

from __future__ import annotations

import functools
import ssl
from typing import Any

# ssl errors that say the stream ended, which a broker going away gives too: a refusal only in the handshake
_SSL_STREAM_END = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _sasl_refusals() -> tuple[type[BaseException], ...]:
    from kafka.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

    return SaslAuthenticationFailedError, UnsupportedSaslMechanismError, IllegalSaslStateError


def authentication_failure(exc: BaseException) -> BaseException | None:
    """The refusal a failed connection carries, by type, or None (a network fault: worth another try).
    SASL: kafka-python's SaslAuthenticationFailedError (the broker refused the credentials),
    UnsupportedSaslMechanismError (not a mechanism of the listener) and IllegalSaslStateError (not a SASL
    listener). TLS: an ``ssl.SSLError``. kafka-python raises a failed handshake as a KafkaConnectionError from
    the ssl error (its context): any kind counts, also a peer that ends the handshake without a word (a
    listener that does not speak TLS). After the handshake the ssl error is the KafkaConnectionError's
    argument: a failed check or the peer's alert (a missing client certificate, under TLS 1.3) counts, the
    end of the stream (SSLEOFError, SSLZeroReturnError, SSLSyscallError) does not: a broker going away says
    that too."""
    if isinstance(exc, _sasl_refusals()):
        return exc
    for candidate in (exc.__cause__, exc.__context__):
        if isinstance(candidate, ssl.SSLError):
            return candidate
    for candidate in (exc, *getattr(exc, "args", ())):
        if isinstance(candidate, ssl.SSLError) and not isinstance(candidate, _SSL_STREAM_END):
            return candidate
    return None


def is_sasl(refusal: BaseException) -> bool:
    return isinstance(refusal, _sasl_refusals())


def broker_reason(refusal: BaseException) -> str:
    """The words of a SASL refusal without kafka-python's prefixes ("[Error 58] SaslAuthenticationFailedError:
    SaslAuthenticationFailedError: ..."): the broker's reason and mechanism, which never hold the password;
    kafka-python's description of the error code when the broker gave none."""
    text, name = str(refusal), type(refusal).__name__
    reason = text.rsplit(f"{name}: ", 1)[-1].strip() if f"{name}: " in text else ""
    return reason or str(getattr(refusal, "description", "") or name)


def read_to_the_end(transport: Any) -> None:
    """Make ``transport`` pass on the bytes of a read that also meets the end of the stream (or a socket
    error), instead of dropping them: the end is reported by the next read, which meets it again."""
    recv = getattr(transport, "_sock_recv", None)
    if recv is None:  # another kafka-python: nothing to fix here (the unit test says so first)
        return

    def sock_recv():
        data, error = recv()
        return (data, None) if data and error is not None else (data, error)

    transport._sock_recv = sock_recv


@functools.cache
def _manager_class() -> type:
    from kafka.net.manager import KafkaConnectionManager

    class OneLoginManager(KafkaConnectionManager):
        """Opens no connection after a refused login or TLS handshake; raises the refusal instead."""

        def __init__(self, net: Any, guard: LoginGuard, **configs: Any) -> None:
            super().__init__(net, **configs)
            self._guard = guard

        def get_connection(self, node_id, *args, **kwargs):
            failure = self._guard.failure
            if failure is not None:
                raise failure.with_traceback(None)
            known = self._conns.get(node_id)
            conn = super().get_connection(node_id, *args, **kwargs)
            if conn is not known:
                conn.init_future.add_errback(self._guard.note)
            return conn

        async def _build_transport(self, node, timeout_at=None):
            transport = await super()._build_transport(node, timeout_at=timeout_at)
            read_to_the_end(transport)
            return transport

    return OneLoginManager


class LoginGuard:
    """One kafka-python client's watch for refusals. Pass ``kafka_client=guard.kafka_client`` to KafkaConsumer
    (or KafkaProducer / KafkaAdminClient, which take the same option); after a failure read ``refusal`` and
    call ``close()``."""

    def __init__(self) -> None:
        self.failure: BaseException | None = None  # the failed connection's error, raised again by the manager
        self.refusal: BaseException | None = None  # what in it is the refusal (authentication_failure)
        self._client: Any = None

    def note(self, exc: BaseException) -> None:
        """A connection failed (its init_future's errback, on the client's IO thread)."""
        refusal = authentication_failure(exc)
        if refusal is not None and self.failure is None:
            self.refusal, self.failure = refusal, exc

    def kafka_client(self, **configs: Any) -> Any:
        from kafka.net.compat import KafkaNetClient
        from kafka.net.selector import NetworkSelector

        net = NetworkSelector(**configs)
        self._client = KafkaNetClient(net=net, manager=_manager_class()(net, self, **configs))
        return self._client

    def close(self) -> None:
        """Stop the client (its connections and IO thread): a KafkaConsumer whose constructor raised does not."""
        if self._client is not None:
            self._client.close()
