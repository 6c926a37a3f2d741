"""SASL mechanisms shared by kipproducer's clients and its reference broker.

- ``scram``: SCRAM-SHA-256 / SCRAM-SHA-512 credentials and both halves of the exchange;
- ``errors``: the authentication errors both sides raise;
- :func:`plain_token`: the single message of SASL/PLAIN (RFC 4616).

Nothing here imports the broker or the engine, so either can use it without loading the other.
"""

from __future__ import annotations

from .scram import HASHES

PLAIN = "PLAIN"
#: The mechanisms kipproducer speaks, with Kafka's exact (case-sensitive) names.
MECHANISMS = (PLAIN, *HASHES)


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    """``authzid NUL authcid NUL password``, UTF-8; Kafka wants an empty or equal authzid."""
    return b"\0".join(part.encode("utf-8") for part in (authzid, username, password))


__all__ = ["HASHES", "MECHANISMS", "PLAIN", "plain_token"]
