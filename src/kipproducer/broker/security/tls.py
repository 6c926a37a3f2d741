"""TLS on the broker's SSL and SASL_SSL listeners: the server context and the client's principal.

Keystores and truststores are PEM, as Kafka takes them since KIP-651:

* ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (one PEM file holding the private key
  and the certificate chain) or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``
  (the PEM text itself); ``ssl.key.password`` when the key is encrypted;
* ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or
  ``ssl.truststore.certificates`` (the CAs client certificates are checked against);
* ``ssl.client.auth``: ``none`` (no client certificate asked for), ``requested`` (asked for,
  checked when given), ``required`` (a connection without one fails its handshake).

On an SSL listener the principal is the client certificate's subject (RFC 2253, as Java's
``X500Principal.getName()`` prints it) after ``ssl.principal.mapping.rules``; a client without a
certificate is ``User:ANONYMOUS``. On SASL_SSL the SASL exchange names the principal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..broker_config import BrokerConfig, BrokerConfigError

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

#: OpenSSL's long attribute names -> the keywords Java's RFC 2253 form uses.
_RDN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


log = logging.getLogger(__name__)


class ListenerContext(ssl.SSLContext):
    """A TLS listener's SSLContext, and the broker's own OpenSSL context for the same keystore
    (``own``) when the listener can use the broker's TLS transport (broker/tls_transport.py):
    no client certificates asked for, Python's cipher choice. None: asyncio's transport."""

    own: Any = None  # kipproducer._tls_server.ServerContext | None


def server_context(config: BrokerConfig) -> ListenerContext:
    """The SSLContext of the broker's TLS listeners; BrokerConfigError names the property."""
    for name, value in (("ssl.keystore.type", config.ssl_keystore_type),
                        ("ssl.truststore.type", config.ssl_truststore_type)):
        if value.upper() != "PEM":
            raise BrokerConfigError(
                f"{name}={value!r}: this broker reads PEM keystores and truststores only "
                "(set it to PEM)")
    client_auth = CLIENT_AUTH.get(config.ssl_client_auth.strip().lower())
    if client_auth is None:
        raise BrokerConfigError(
            f"ssl.client.auth={config.ssl_client_auth!r}: expected none, requested or required")
    context = ListenerContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = config.ssl_key_password or None
    with _keystore_file(config) as (path, what):
        _load_chain(context, path, password, what)
        if client_auth == ssl.CERT_NONE and not config.ssl_cipher_suites.strip():
            context.own = _own_context(path, password)
    context.verify_mode = client_auth
    if client_auth != ssl.CERT_NONE:
        _load_truststore(context, config)
    if config.ssl_cipher_suites.strip():
        try:
            context.set_ciphers(config.ssl_cipher_suites.replace(" ", ""))
        except ssl.SSLError as exc:
            raise BrokerConfigError(f"ssl.cipher.suites: {exc}") from None
    return context


def _own_context(path: str, password: str | None) -> Any:
    """The broker's own OpenSSL context for a keystore Python's ssl module just loaded, or
    None (asyncio's transport then) when the TLS layer is not built or cannot load it."""
    try:
        from ..._tls_server import ServerContext  # noqa: PLC0415 (built only with OpenSSL)
    except ImportError:
        return None
    try:
        return ServerContext(path, password)
    except OSError as exc:  # loaded by Python's ssl a moment ago: not expected
        log.warning("the broker's TLS layer cannot load the keystore (%s); this listener "
                    "uses asyncio's TLS transport", exc)
        return None


@contextlib.contextmanager
def _keystore_file(config: BrokerConfig) -> Iterator[tuple[str, str]]:
    """The PEM file with the key and the chain, and the properties that name it: the
    configured file, or the inline PEM written to a private temporary file for the time of
    loading it (the ssl module loads keys from files only)."""
    location = config.ssl_keystore_location.strip()
    chain, key = config.ssl_keystore_certificate_chain, config.ssl_keystore_key
    if location and (chain or key):
        raise BrokerConfigError(
            "set ssl.keystore.location or ssl.keystore.certificate.chain + ssl.keystore.key, "
            "not both")
    if location:
        if not os.path.isfile(location):
            raise BrokerConfigError(f"ssl.keystore.location: no such file {location!r}")
        yield location, "ssl.keystore.location"
        return
    if not (chain and key):
        raise BrokerConfigError(
            "a TLS listener needs a keystore: ssl.keystore.location (a PEM file with the key "
            "and the certificate chain) or ssl.keystore.certificate.chain + ssl.keystore.key")
    handle, path = tempfile.mkstemp(prefix="kip-keystore-", suffix=".pem")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        yield path, "ssl.keystore.certificate.chain / ssl.keystore.key"
    finally:
        os.unlink(path)


def _load_chain(context: ssl.SSLContext, path: str, password: str | None, what: str) -> None:
    def no_password() -> str:  # never OpenSSL's prompt on the terminal
        raise BrokerConfigError(f"{what}: the private key is encrypted and ssl.key.password "
                                "is not set")

    try:
        context.load_cert_chain(path, password=password or no_password)
    except ssl.SSLError as exc:
        hint = " (wrong or missing ssl.key.password?)" if "PEM lib" in str(exc) or \
            "bad decrypt" in str(exc) else ""
        raise BrokerConfigError(f"{what}: cannot load the key and certificate: "
                                f"{exc}{hint}") from None


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig) -> None:
    location = config.ssl_truststore_location.strip()
    certificates = config.ssl_truststore_certificates
    try:
        if location:
            if not os.path.exists(location):
                raise BrokerConfigError(f"ssl.truststore.location: no such file {location!r}")
            context.load_verify_locations(cafile=location)
        elif certificates.strip():
            context.load_verify_locations(cadata=certificates)
        else:
            raise BrokerConfigError(
                f"ssl.client.auth={config.ssl_client_auth}: client certificates need a "
                "truststore (ssl.truststore.location or ssl.truststore.certificates)")
    except ssl.SSLError as exc:
        raise BrokerConfigError(f"ssl.truststore: cannot load the CA certificates: "
                                f"{exc}") from None


# -- the principal of a client certificate ---------------------------------------------------


def subject_dn(peercert: dict) -> str:
    """A certificate's subject in RFC 2253 form (most specific RDN first), as Kafka sees it."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_RDN_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        name = match.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))\s*(?:,|$)")


def parse_mapping_rules(text: str) -> tuple[MappingRule, ...]:
    """``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``,
    comma-separated, tried in order; ``$1`` in a replacement is the pattern's first group."""
    rules: list[MappingRule] = []
    position, text = 0, text.strip()
    while position < len(text):
        match = _RULE.match(text, position)
        if match is None or match.end() == position:
            raise BrokerConfigError(
                f"ssl.principal.mapping.rules: cannot read the rule at {text[position:]!r} "
                "(expected RULE:pattern/replacement/[LU] or DEFAULT)")
        position = match.end()
        if match["default"]:
            rules.append(MappingRule(None))
            continue
        try:
            pattern = re.compile(match["pattern"])
        except re.error as exc:
            raise BrokerConfigError(
                f"ssl.principal.mapping.rules: bad pattern {match['pattern']!r}: {exc}") from None
        replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match["replacement"].replace("\\/", "/"))
        rules.append(MappingRule(pattern, replacement, match["case"]))
    return tuple(rules) or (MappingRule(None),)


class NoMappingRule(Exception):
    """No ssl.principal.mapping.rules rule matches a certificate's subject."""


def principal_name(dn: str, rules: tuple[MappingRule, ...]) -> str:
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMappingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
