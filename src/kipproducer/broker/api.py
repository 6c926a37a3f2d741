"""The broker's API table: which request handler serves which (api_key, versions).

Handlers register with :func:`handles`; ApiVersions advertises exactly this table, so what
the broker claims and what it serves cannot drift apart.

``advertise_min`` exists for librdkafka: before 2.11.1 it enabled features by overlap with
exact old versions (e.g. Produce 2, Fetch 2 for MSGVER1/THROTTLETIME), so Kafka 4.x and this
broker advertise MinVersion 0 for those APIs while refusing the old versions if one is ever
actually sent (see ../shared/reference/kafka-protocol-facts.md §6.3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .broker import Broker
    from .security.sasl import SaslSession


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: Broker
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


def handles(api_key: int, min_version: int, max_version: int, *, advertise_min: int | None = None):
    """Register the decorated coroutine as the handler of ``api_key`` for those versions."""

    def register(handler: Handler) -> Handler:
        if api_key in API_TABLE:
            raise RuntimeError(f"api key {api_key} has two handlers")
        API_TABLE[api_key] = ApiSpec(
            api_key,
            min_version,
            max_version,
            min_version if advertise_min is None else advertise_min,
            handler,
        )
        return handler

    return register
