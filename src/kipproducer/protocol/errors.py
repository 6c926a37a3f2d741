"""The single exception type of the protocol layer."""

from __future__ import annotations

from typing import Any


class ProtocolError(ValueError):
    """Malformed or unsupported protocol data, on decode or on encode.

    Every failure of this layer surfaces as this type (never IndexError, KeyError or
    struct.error), with a message that names what was wrong. When a request header was
    parsed before the failure, it is attached as ``header`` so that a broker can still
    answer the request (e.g. ApiVersions at an unsupported version) or log it.
    """

    def __init__(self, message: str, *, header: Any = None) -> None:
        super().__init__(message)
        self.header = header
