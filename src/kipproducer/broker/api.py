"""The broker's API table: which request handler serves which (api_key, versions).

Handlers register with :func:`handles`; ApiVersions advertises exactly this table, so what
the broker claims and what it serves cannot drift apart. Each handler must serve up to the top
version Kafka 3.9 advertises for its API (``kafka_release.KAFKA_3_9``), and the advertised
minimum is 3.9's: a handler's own ``min_version`` is the oldest version the protocol layer can
decode, older ones being refused if sent (kafka_release explains why they are advertised).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .kafka_release import KAFKA_3_9, NOT_SERVED

if TYPE_CHECKING:
    from .security.sasl import SaslSession
    from .view import BrokerView


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: BrokerView
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
    principal: str = "User:ANONYMOUS"
    #: The connection's SASL state (SaslHandshake / SaslAuthenticate drive it).
    session: SaslSession | None = None


Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    advertise_min: int
    handler: Handler


API_TABLE: dict[int, ApiSpec] = {}


def handles(api_key: int, min_version: int, max_version: int):
    """Register the decorated coroutine as the handler of ``api_key`` for those versions.

    :raises RuntimeError: at import, for a second handler of a key, a key Kafka 3.9 does not
        advertise (or that kafka_release lists as not served), or a top version other than
        3.9's.
    """
    release = KAFKA_3_9.get(api_key)
    if release is None or api_key in NOT_SERVED:
        raise RuntimeError(f"api key {api_key} is not in the advertised Kafka 3.9 table")
    if max_version != release[1] or min_version < release[0]:
        raise RuntimeError(
            f"api key {api_key}: handler serves v{min_version}-{max_version}, Kafka 3.9"
            f" advertises v{release[0]}-{release[1]}"
        )

    def register(handler: Handler) -> Handler:
        if api_key in API_TABLE:
            raise RuntimeError(f"api key {api_key} has two handlers")
        API_TABLE[api_key] = ApiSpec(api_key, min_version, max_version, release[0], handler)
        return handler

    return register
