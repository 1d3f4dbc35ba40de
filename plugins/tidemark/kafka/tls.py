"""TLS of a Kafka connection, under Kafka's own property names, for both of Tidemark's Kafka clients.

A connection whose ``security.protocol`` is ``SSL`` or ``SASL_SSL`` gives

* the CA it trusts: ``ssl.truststore.type=PEM`` with ``ssl.truststore.certificates`` (PEM text), a
  PEM file as ``ssl.truststore.location`` (type PEM) or ``ssl.cafile``; none: the system's CAs;
* a client certificate and key (mutual TLS): ``ssl.keystore.type=PEM`` with
  ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key`` (PEM text), a PEM file holding both
  as ``ssl.keystore.location`` (type PEM), or ``ssl.certfile`` and ``ssl.keyfile``; an encrypted
  key's password as ``ssl.key.password`` (or ``ssl.password``);
* hostname verification, on unless ``ssl.endpoint.identification.algorithm`` is empty (Kafka's own
  switch; kafka-python's ``ssl.check.hostname=false`` works too).

kafka-python gets one ``ssl.SSLContext`` built from them (:func:`ssl_context`); Kafka's Java client
in Spark's Kafka source gets the same material as PEM text (:func:`java_tls_properties`): a path is
read where the options are built, so no file needs to exist on an executor.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tidemark.errors import ConfigError

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s.*?-----END \1-----", re.DOTALL)
# kafka-python's spellings, which Kafka's Java client does not know
_PYTHON_ONLY = ("ssl.cafile", "ssl.certfile", "ssl.keyfile", "ssl.password", "ssl.check.hostname")


def uses_tls(properties: Mapping[str, str]) -> bool:
    return str(properties.get("security.protocol", "")).upper() in ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class TlsMaterial:
    """The PEM text of the trusted CAs and of the client's chain and key (None: not given)."""

    ca: str | None
    chain: str | None
    key: str | None
    key_password: str | None
    check_hostname: bool


def _blocks(text: str, key: bool) -> list[str]:
    """The PEM blocks of certificates (or, with ``key``, of private keys) in the text."""
    return [m.group(0) for m in _PEM_BLOCK.finditer(text)
            if m.group(1).endswith("PRIVATE KEY") == key and (key or m.group(1) == "CERTIFICATE")]


def _read(properties: Mapping[str, str], name: str) -> str:
    path = str(properties[name])
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the Kafka connection's {name} '{path}' cannot be read "
                          f"({getattr(exc, 'strerror', None) or type(exc).__name__}); give a PEM file readable "
                          f"here, or the PEM text itself (ssl.truststore.certificates, ssl.keystore.key)") from None


def _pem_typed(properties: Mapping[str, str], store: str, pem_only: bool) -> bool:
    """Whether ``ssl.<store>.location`` is a PEM file; a JKS or PKCS12 store is one kafka-python cannot read."""
    kind = str(properties.get(f"ssl.{store}.type", "")).upper()
    if f"ssl.{store}.location" not in properties or kind == "PEM":
        return f"ssl.{store}.location" in properties
    if pem_only:
        raise ConfigError(f"the Kafka connection's ssl.{store}.location is a {kind or 'JKS'} file, which kafka-python "
                          f"(Tidemark's planner) cannot read: give it in PEM (ssl.{store}.type=PEM), e.g. converted "
                          f"with `keytool -exportcert -rfc` / `openssl pkcs12 -nodes`")
    return False


def _certificates(text: str, name: str) -> str:
    found = _blocks(text, key=False)
    if not found:
        raise ConfigError(f"the Kafka connection's {name} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return "\n".join(found) + "\n"


def _ca(properties: Mapping[str, str], pem_only: bool) -> str | None:
    if properties.get("ssl.truststore.certificates"):
        return _certificates(str(properties["ssl.truststore.certificates"]), "ssl.truststore.certificates")
    if _pem_typed(properties, "truststore", pem_only):
        return _certificates(_read(properties, "ssl.truststore.location"), "ssl.truststore.location")
    if properties.get("ssl.cafile"):
        return _certificates(_read(properties, "ssl.cafile"), "ssl.cafile")
    return None


def _client_pem(properties: Mapping[str, str], pem_only: bool) -> tuple[str, str, tuple[str, str]] | None:
    """The client's chain and key text as given, and the properties they came from; None without them."""
    if properties.get("ssl.keystore.certificate.chain") or properties.get("ssl.keystore.key"):
        return (str(properties.get("ssl.keystore.certificate.chain", "")), str(properties.get("ssl.keystore.key", "")),
                ("ssl.keystore.certificate.chain", "ssl.keystore.key"))
    if _pem_typed(properties, "keystore", pem_only):
        text = _read(properties, "ssl.keystore.location")
        return text, text, ("ssl.keystore.location", "ssl.keystore.location")
    if properties.get("ssl.certfile"):
        chain = _read(properties, "ssl.certfile")
        if properties.get("ssl.keyfile"):
            return chain, _read(properties, "ssl.keyfile"), ("ssl.certfile", "ssl.keyfile")
        return chain, chain, ("ssl.certfile", "ssl.certfile")
    return None


def _one_key(text: str, name: str) -> str:
    keys = _blocks(text, key=True)
    if len(keys) != 1:
        raise ConfigError(f"the Kafka connection's {name} holds {len(keys)} PEM private keys, not one "
                          f"(-----BEGIN PRIVATE KEY-----)")
    return keys[0] + "\n"


def _client(properties: Mapping[str, str], pem_only: bool) -> tuple[str | None, str | None]:
    """The client's certificate chain and key, as PEM text (None, None without a client certificate)."""
    given = _client_pem(properties, pem_only)
    if given is None:
        return None, None
    chain_text, key_text, (chain_name, key_name) = given
    key = _one_key(key_text, key_name)
    chain = _certificates(chain_text, chain_name)
    _check_validity(chain, chain_name, properties)
    return chain, key


def listener(properties: Mapping[str, str]) -> str:
    """The listener a connection speaks to, for messages: its bootstrap servers and protocol."""
    protocol = str(properties.get("security.protocol", "PLAINTEXT")).upper()
    return f"Kafka at {properties.get('bootstrap.servers', '(no bootstrap.servers)')} ({protocol})"


def _check_validity(chain: str, name: str, properties: Mapping[str, str]) -> None:
    """A client certificate out of its validity period is refused by the broker with no reason given
    (``certificate_unknown``): say which certificate and when, before any connection."""
    from cryptography import x509

    leaf = x509.load_pem_x509_certificate(_blocks(chain, key=False)[0].encode("ascii"))
    now = dt.datetime.now(dt.UTC)
    subject = leaf.subject.rfc4514_string()
    if leaf.not_valid_after_utc < now:
        raise ConfigError(f"the Kafka connection's client certificate for {listener(properties)} ({subject}, in "
                          f"{name}) expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; renew it. Nothing "
                          f"was read or committed.")
    if leaf.not_valid_before_utc > now:
        raise ConfigError(f"the Kafka connection's client certificate for {listener(properties)} ({subject}, in "
                          f"{name}) is not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC; check the "
                          f"clocks or the certificate. Nothing was read or committed.")


def _check_hostname(properties: Mapping[str, str]) -> bool:
    if "ssl.endpoint.identification.algorithm" in properties:
        algorithm = str(properties["ssl.endpoint.identification.algorithm"]).strip().lower()
        if algorithm not in ("", "https"):
            raise ConfigError(f"the Kafka connection's ssl.endpoint.identification.algorithm is '{algorithm}'; "
                              f"Kafka knows 'https' (verify the broker's hostname, the default) and '' (do not)")
        return algorithm == "https"
    return str(properties.get("ssl.check.hostname", "true")).strip().lower() not in ("false", "0", "no")


def tls_material(properties: Mapping[str, str], *, pem_only: bool = True) -> TlsMaterial:
    """The connection's TLS settings as PEM text. ``pem_only``: refuse JKS/PKCS12 stores (kafka-python);
    without it they are left to the Java client (and so must exist wherever it runs)."""
    chain, key = _client(properties, pem_only)
    password = properties.get("ssl.key.password") or properties.get("ssl.password")
    return TlsMaterial(_ca(properties, pem_only), chain, key, str(password) if password else None,
                       _check_hostname(properties))


@contextlib.contextmanager
def _private_files(*texts: str) -> Iterator[list[str]]:
    """The texts in files only this user can read (mode 0600), removed on exit: Python's ssl module
    loads a certificate and key from files only."""
    paths: list[str] = []
    try:
        for text in texts:
            handle, path = tempfile.mkstemp(prefix="tidemark-tls-", suffix=".pem")  # mode 0600
            paths.append(path)
            with os.fdopen(handle, "w", encoding="ascii") as out:
                out.write(text)
        yield paths
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def ssl_context(properties: Mapping[str, str]) -> ssl.SSLContext:
    """kafka-python's TLS, built once: it verifies the broker against the CA (and its hostname unless
    switched off) and presents the client certificate, as Kafka's Java client would."""
    tls = tls_material(properties)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = tls.check_hostname
    try:
        if tls.ca:
            context.load_verify_locations(cadata=tls.ca)
        else:
            context.load_default_certs()
        if tls.chain and tls.key:
            with _private_files(tls.chain, tls.key) as (chain, key):
                context.load_cert_chain(chain, key, password=tls.key_password)
    except ssl.SSLError as exc:
        raise ConfigError(f"the Kafka connection's TLS certificates or key cannot be loaded ({exc.reason or exc}); "
                          f"check that the key belongs to the certificate and its ssl.key.password") from None
    return context


def java_tls_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties for Kafka's Java client with the TLS material as PEM text (read here from any
    PEM path), so that an executor needs no file; kafka-python's spellings become Kafka's."""
    props = {k: v for k, v in properties.items() if k not in _PYTHON_ONLY}
    if not uses_tls(properties):
        return props
    tls = tls_material(properties, pem_only=False)
    if tls.ca:
        props = {k: v for k, v in props.items() if not k.startswith("ssl.truststore.")}
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": tls.ca})
    if tls.chain and tls.key:
        if "BEGIN PRIVATE KEY" not in tls.key and "BEGIN ENCRYPTED PRIVATE KEY" not in tls.key:
            raise ConfigError("the Kafka connection's client key is not in PKCS#8 form, which Kafka's Java client "
                              "(Spark) needs: convert it with `openssl pkcs8 -topk8 -nocrypt -in KEY`")
        props = {k: v for k, v in props.items() if not k.startswith("ssl.keystore.") and k != "ssl.key.password"}
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": tls.chain,
                      "ssl.keystore.key": tls.key})
        if tls.key_password:
            props["ssl.key.password"] = tls.key_password
    props["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else ""
    return props


def key_secrets(properties: Mapping[str, str]) -> list[str]:
    """The client's private key as secrets to mask: the PEM text and each line of it (a log line
    holds one line of a PEM block at most). A key file that cannot be read here is skipped."""
    try:
        given = _client_pem(properties, pem_only=False)
    except ConfigError:
        return []
    if given is None:
        return []
    keys = _blocks(given[1], key=True)
    lines = [line.strip() for key in keys for line in key.splitlines()[1:-1] if len(line.strip()) >= 16]
    return [*keys, *(key + "\n" for key in keys), *lines]


_PYTHON_SSL = re.compile(r"\[SSL: (\w+)\] ([^(\n]*)")
_JAVA_HANDSHAKE = re.compile(r"(?:SSLHandshakeException|SSLException|CertificateException|"
                             r"CertPathValidatorException|SunCertPathBuilderException): ([^\n]*)")
_HOSTNAME = re.compile(r"mismatch|No subject alternative|No name matching", re.IGNORECASE)
_CLIENT_REFUSED = re.compile(r"ALERT_(BAD_CERTIFICATE|CERTIFICATE_REQUIRED|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|"
                             r"UNKNOWN_CA|HANDSHAKE_FAILURE)|fatal alert: (bad_certificate|certificate_required|"
                             r"certificate_unknown|certificate_expired|unknown_ca|handshake_failure)")


def has_client_certificate(properties: Mapping[str, str]) -> bool:
    try:
        return _client_pem(properties, pem_only=False) is not None
    except ConfigError:
        return True


def handshake_failure(text: str, client_certificate: bool | None = None) -> str | None:
    """The cause of a failed TLS handshake in an error's text (kafka-python's ssl error, or the Java
    client's in a Spark error), said with what to fix; None if the text shows no TLS failure.
    ``client_certificate``: whether the connection gives one (None: unknown)."""
    python, java = _PYTHON_SSL.search(text), _JAVA_HANDSHAKE.findall(text)
    if python is None and not java and "SslAuthenticationException" not in text:
        return None
    detail = python.group(2).strip() if python else (java[-1].strip() if java else "SSL handshake failed")
    if _HOSTNAME.search(detail):
        return (f"the broker's certificate does not hold the name it was reached by ({detail}): use a host name "
                f"or address its certificate names in bootstrap.servers (hostname verification is on; an empty "
                f"ssl.endpoint.identification.algorithm turns it off, for test CAs only)")
    if _CLIENT_REFUSED.search(text):
        given = {None: "", True: "; the connection's was refused", False: "; the connection gives none"}
        return (f"the broker ended the handshake ({detail}): this listener requires a client certificate signed by "
                f"a CA the broker trusts and not expired{given[client_certificate]}: give ssl.keystore.certificate."
                f"chain and ssl.keystore.key (or ssl.certfile and ssl.keyfile)")
    if "VERIFY_FAILED" in text or "PKIX" in text or "certification path" in text:
        return (f"the broker's certificate is not trusted ({detail}): give the CA that signed it as "
                f"ssl.truststore.certificates (PEM text) or ssl.cafile")
    return f"the TLS handshake failed ({detail})"
