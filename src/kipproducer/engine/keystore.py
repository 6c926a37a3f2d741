"""The client's PKCS#12 keystore (``ssl.keystore.location`` + ``ssl.keystore.password``), read
as librdkafka reads it: the private key, its certificate and any further certificates of the
chain, all from one file.

Python's ssl module takes a client certificate from files only, so engine/tls.py writes the
key and chain to a private temporary file (mode 0600, unlinked as soon as the SSLContext
holds them), as for inline PEM; the key is encrypted under a one-time random password first,
so it is never on disk in the clear, not even for that moment.

Java's JKS / JCEKS keystores are not PKCS#12 and librdkafka does not read them either: they
are refused with the ``keytool`` command that converts one.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

#: The first four bytes of Java's own keystore formats.
_JAVA_KEYSTORE_MAGIC = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}


class KeystoreError(ValueError):
    """ssl.keystore.* cannot be used: the message names the property and the cause."""


def keystore_given(props: Mapping[str, Any]) -> bool:
    return bool(str(props.get("ssl.keystore.location", "") or "").strip())


def read_keystore(props: Mapping[str, Any]) -> tuple[str, str, str]:
    """``ssl.keystore.location``'s key and certificate chain as PEM texts for the SSLContext:
    (the key, encrypted with a one-time password; the chain, the client's certificate first;
    that password)."""
    location = str(props.get("ssl.keystore.location", "") or "").strip()
    password = props.get("ssl.keystore.password")
    if password is None:
        # librdkafka refuses the same configuration when the Producer is built.
        raise KeystoreError("ssl.keystore.password is mandatory when ssl.keystore.location "
                            "is set")
    try:
        with open(location, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise KeystoreError(f"ssl.keystore.location: cannot read {location!r}: "
                            f"{exc.strerror or exc}") from None
    key_pem, chain_pem, one_time = _pkcs12_as_pem(data, location, str(password))
    return key_pem.decode(), chain_pem.decode(), one_time


def _pkcs12_as_pem(data: bytes, location: str, password: str) -> tuple[bytes, bytes, str]:
    """The keystore's key (PEM, encrypted with a one-time password), its certificate chain
    (PEM, the client's certificate first) and that one-time password."""
    kind = _JAVA_KEYSTORE_MAGIC.get(data[:4])
    if kind is not None:
        raise KeystoreError(
            f"ssl.keystore.location: {location!r} is a Java {kind} keystore; librdkafka and "
            "kipproducer read PKCS#12 only. Convert it with `keytool -importkeystore "
            f"-srckeystore {os.path.basename(location)} -destkeystore client.p12 "
            "-deststoretype PKCS12`, or export the certificate and key as PEM "
            "(ssl.certificate.location + ssl.key.location)")
    if data.lstrip().startswith(b"-----BEGIN"):
        raise KeystoreError(
            f"ssl.keystore.location: {location!r} is a PEM file, not PKCS#12; give PEM files "
            "as ssl.certificate.location and ssl.key.location")
    if not _looks_like_pkcs12(data):
        raise KeystoreError(f"ssl.keystore.location: {location!r} is not a PKCS#12 file")
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # a dependency of kipproducer; only a broken install lacks it
        raise KeystoreError("ssl.keystore.location needs the `cryptography` package to read "
                            "PKCS#12; install it, or give the certificate and key as "
                            "PEM") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError:
        if not password:
            raise KeystoreError("ssl.keystore.password: the PKCS#12 file "
                                f"{location!r} is encrypted and the password is "
                                "empty") from None
        # The file is PKCS#12 (checked above): what fails is its MAC / decryption.
        raise KeystoreError(f"ssl.keystore.password: the PKCS#12 file {location!r} does not "
                            "open with it (wrong password?)") from None
    if key is None:
        raise KeystoreError(f"ssl.keystore.location: {location!r} holds no private key")
    if cert is None:
        raise KeystoreError(f"ssl.keystore.location: {location!r} holds no certificate")
    one_time = secrets.token_hex(16)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time.encode()))
    chain = [cert, *(extra or ())]
    chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    return key_pem, chain_pem, one_time


def _looks_like_pkcs12(data: bytes) -> bool:
    """A DER SEQUENCE whose first element is INTEGER 3: PFX's version (RFC 7292)."""
    if len(data) < 8 or data[0] != 0x30:
        return False
    first_length = data[1]
    header = 2 + (first_length & 0x7F if first_length & 0x80 else 0)
    return data[header:header + 3] == b"\x02\x01\x03"
