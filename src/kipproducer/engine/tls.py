"""TLS for the engine's connections (security.protocol SSL / SASL_SSL), from librdkafka's
property names with librdkafka's defaults:

* ``ssl.ca.location`` (a CA file or a directory of hashed CA files; unset: the system's
  store) and/or ``ssl.ca.pem`` (the CA certificates as PEM text);
* ``ssl.certificate.location`` / ``ssl.certificate.pem`` and ``ssl.key.location`` /
  ``ssl.key.pem`` with ``ssl.key.password``: the client certificate (mTLS);
* or ``ssl.keystore.location`` with ``ssl.keystore.password``: the client certificate, its
  chain and key in one PKCS#12 file (engine/keystore.py);
* ``ssl.endpoint.identification.algorithm``: ``https`` (the default: the broker's certificate
  must name the host connected to) or ``none``;
* ``enable.ssl.certificate.verification``: ``true`` (the default) or ``false`` (no checks at
  all, for tests only);
* ``ssl.cipher.suites``: an OpenSSL cipher list.

Everything that can be checked before connecting is checked when the settings are read (a
missing file, a key that does not open with ``ssl.key.password``), and the error names the
property. What only the handshake shows (an unknown CA, a name mismatch) is a
:class:`~kipproducer.engine.connection.BrokerTlsError` on the first connection.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..client_config import default, parse_bool
from .keystore import KeystoreError, keystore_given, read_keystore

#: librdkafka's certificate sources the engine does not read: the Windows certificate store,
#: OpenSSL engines and providers.
UNSUPPORTED = ("ssl.certificate.store.location", "ssl.engine.location",
               "ssl_engine_callback_data", "ssl.providers")


class TlsConfigError(ValueError):
    """A TLS property has a bad value: a missing file, a key that will not open."""


@dataclass(frozen=True)
class TlsSettings:
    """The SSLContext of the engine's connections and whether host names are checked."""

    context: ssl.SSLContext
    check_hostname: bool
    #: What the CAs are (ssl.ca.location's value, or "the system's CA store"), for errors.
    ca_source: str


def _bool(name: str, value: Any) -> bool:
    """The one boolean parser (client_config.parse_bool), failing as TLS settings do."""
    try:
        return parse_bool(value)
    except ValueError as exc:
        raise TlsConfigError(f"{name}={value!r}: {exc}") from None


def tls_settings(props: Mapping[str, Any]) -> TlsSettings:
    """The TLS settings of ``props``; TlsConfigError naming the property for a bad one."""
    for name in UNSUPPORTED:
        if props.get(name):
            raise TlsConfigError(
                f"{name} is not supported by kipproducer's engine: give the certificate and "
                "key as PEM (ssl.certificate.location + ssl.key.location, or ssl.certificate.pem "
                "+ ssl.key.pem) or as a PKCS#12 file (ssl.keystore.location + "
                "ssl.keystore.password)")
    algorithm = str(props.get("ssl.endpoint.identification.algorithm",
                              default("ssl.endpoint.identification.algorithm"))).strip().lower()
    if algorithm not in ("https", "none"):
        raise TlsConfigError(
            f"ssl.endpoint.identification.algorithm={algorithm!r}: expected https or none")
    verify = _bool("enable.ssl.certificate.verification",
                   props.get("enable.ssl.certificate.verification",
                             default("enable.ssl.certificate.verification")))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    check_hostname = verify and algorithm == "https"
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    ca_source = _load_cas(context, props) if verify else "no verification"
    _load_client_certificate(context, props)
    ciphers = str(props.get("ssl.cipher.suites", "") or "").strip()
    if ciphers:
        try:
            context.set_ciphers(ciphers)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"ssl.cipher.suites={ciphers!r}: {exc}") from None
    return TlsSettings(context, check_hostname, ca_source)


def _load_cas(context: ssl.SSLContext, props: Mapping[str, Any]) -> str:
    location = str(props.get("ssl.ca.location", "") or "").strip()
    pem = str(props.get("ssl.ca.pem", "") or "").strip()
    sources = []
    if location and location != "probe":
        try:
            if os.path.isdir(location):
                context.load_verify_locations(capath=location)
            elif os.path.isfile(location):
                context.load_verify_locations(cafile=location)
            else:
                raise TlsConfigError(f"ssl.ca.location: no such file or directory {location!r}")
        except ssl.SSLError as exc:
            raise TlsConfigError(
                f"ssl.ca.location: {location!r} holds no usable CA certificate: {exc}") from None
        sources.append(f"ssl.ca.location={location}")
    if pem:
        try:
            context.load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(f"ssl.ca.pem: not a PEM CA certificate: {exc}") from None
        sources.append("ssl.ca.pem")
    if not sources:
        context.load_default_certs()
        sources.append("the system's CA store (ssl.ca.location not set)")
    return ", ".join(sources)


def _load_client_certificate(context: ssl.SSLContext, props: Mapping[str, Any]) -> None:
    cert_location = str(props.get("ssl.certificate.location", "") or "").strip()
    cert_pem = str(props.get("ssl.certificate.pem", "") or "").strip()
    key_location = str(props.get("ssl.key.location", "") or "").strip()
    key_pem = str(props.get("ssl.key.pem", "") or "").strip()
    password = props.get("ssl.key.password")
    if keystore_given(props):
        if cert_location or cert_pem or key_location or key_pem:
            raise TlsConfigError(
                "ssl.keystore.location holds the client certificate and key: give either it "
                "or ssl.certificate.* + ssl.key.*, not both")
        try:
            key_pem, chain_pem, one_time = read_keystore(props)
        except KeystoreError as exc:
            raise TlsConfigError(str(exc)) from None
        keystore: list[str] = []
        try:
            path = _private_file(key_pem + chain_pem, keystore, prefix="kip-keystore-")
            context.load_cert_chain(path, path, password=one_time)
        except ssl.SSLError as exc:
            raise TlsConfigError(
                f"ssl.keystore.location: the key and certificate in "
                f"{str(props['ssl.keystore.location']).strip()!r} cannot be used: {exc}") from None
        finally:
            for made in keystore:
                os.unlink(made)
        return
    if not (cert_location or cert_pem or key_location or key_pem):
        return
    if not (cert_location or cert_pem) or not (key_location or key_pem):
        raise TlsConfigError(
            "a client certificate needs both ssl.certificate.location (or ssl.certificate.pem) "
            "and ssl.key.location (or ssl.key.pem)")
    for name, path in (("ssl.certificate.location", cert_location),
                       ("ssl.key.location", key_location)):
        if path and not os.path.isfile(path):
            raise TlsConfigError(f"{name}: no such file {path!r}")
    key_name = "ssl.key.location" if key_location else "ssl.key.pem"

    def no_password() -> str:
        raise TlsConfigError(f"the private key in {key_name} is encrypted and "
                             "ssl.key.password is not set")

    temporary: list[str] = []
    try:
        if cert_pem:
            cert_location = _private_file(cert_pem, temporary)
        if key_pem:
            key_location = _private_file(key_pem, temporary)
        try:
            context.load_cert_chain(cert_location, key_location,
                                    password=str(password) if password else no_password)
        except ssl.SSLError as exc:
            text = str(exc)
            if password and ("bad decrypt" in text or "BAD_DECRYPT" in text or
                             "PEM lib" in text):
                raise TlsConfigError(
                    f"ssl.key.password: the private key in {key_name} does not open with it "
                    f"(wrong password?): {exc}") from None
            if "KEY_VALUES_MISMATCH" in text or "key values mismatch" in text:
                raise TlsConfigError(
                    f"{key_name} is not the key of the certificate in ssl.certificate.*: "
                    f"{exc}") from None
            raise TlsConfigError(
                f"cannot load the client certificate and key (ssl.certificate.*, "
                f"{key_name}): {exc}") from None
    finally:
        for path in temporary:
            os.unlink(path)


def _private_file(text: str, created: list[str], prefix: str = "kip-tls-") -> str:
    """The ssl module loads certificates and keys from files only: a private temporary one
    (mode 0600)."""
    handle, path = tempfile.mkstemp(prefix=prefix, suffix=".pem")
    created.append(path)
    with os.fdopen(handle, "w") as out:
        out.write(text + "\n")
    return path


def describe_handshake_error(exc: BaseException, settings: TlsSettings, where: str) -> str:
    """A TLS handshake failure in words that name the certificate problem and the property."""
    text = str(getattr(exc, "verify_message", "") or exc)
    code = getattr(exc, "verify_code", None)
    if isinstance(exc, ssl.SSLCertVerificationError):
        if "Hostname mismatch" in text or "IP address mismatch" in text or code == 62 \
                or code == 64:
            return (f"TLS handshake with {where} failed: the broker's certificate does not name "
                    f"the host connected to ({text}); check the bootstrap address, or set "
                    "ssl.endpoint.identification.algorithm=none to skip this check")
        return (f"TLS handshake with {where} failed: certificate verify failed: {text}; the "
                f"broker's certificate is not signed by a CA in {settings.ca_source}")
    return f"TLS handshake with {where} failed: {exc}"
