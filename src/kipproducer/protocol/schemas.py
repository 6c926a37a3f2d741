"""Which class describes each (api_key, version), and which header goes with it.

Lookups go through kio's index, except Produce v9..v13 where the classes extended
with the kipproducer wire fields are returned instead (see wire_extensions).
"""

from __future__ import annotations

from functools import cache

import kio.index
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from .api_keys import PRODUCE
from .errors import ProtocolError
from .wire_extensions import PRODUCE_REQUEST_CLASSES, PRODUCE_RESPONSE_CLASSES


def api_name(api_key: int) -> str:
    """kio's snake_case name of an API (``3`` → ``"metadata"``)."""
    try:
        return api_key_map[api_key]
    except KeyError:
        raise ProtocolError(f"unknown api key {api_key}") from None


def known_api_keys() -> tuple[int, ...]:
    return tuple(sorted(api_key_map))


@cache
def _versions(api_key: int, entity_type: EntityType) -> tuple[int, ...]:
    by_version = schema_name_map[api_name(api_key)]
    return tuple(sorted(v for v, kinds in by_version.items() if entity_type in kinds))


def known_versions(api_key: int) -> tuple[int, ...]:
    """Every version kio has a request class for (contiguous in kio 0.6.5)."""
    return _versions(api_key, EntityType.request)


def version_range(api_key: int) -> tuple[int, int]:
    """(min, max) request version kio knows for an API."""
    versions = known_versions(api_key)
    return versions[0], versions[-1]


@cache
def request_class(api_key: int, version: int) -> type:
    """The payload class of a request.

    :raises ProtocolError: for an api key or version kio does not know.
    """
    if api_key == PRODUCE and version in PRODUCE_REQUEST_CLASSES:
        return PRODUCE_REQUEST_CLASSES[version]
    try:
        return kio.index.load_request_schema(api_key, version)
    except kio.index.UnknownAPIKey:
        raise ProtocolError(f"unknown api key {api_key}") from None
    except kio.index.UnknownEntity:
        raise ProtocolError(f"unsupported version {version} of api key {api_key}") from None


@cache
def response_class(api_key: int, version: int) -> type:
    """The payload class of a response.

    :raises ProtocolError: for an api key or version kio does not know.
    """
    if api_key == PRODUCE and version in PRODUCE_RESPONSE_CLASSES:
        return PRODUCE_RESPONSE_CLASSES[version].response
    try:
        return kio.index.load_response_schema(api_key, version)
    except kio.index.UnknownAPIKey:
        raise ProtocolError(f"unknown api key {api_key}") from None
    except kio.index.UnknownEntity:
        raise ProtocolError(f"unsupported version {version} of api key {api_key}") from None


def request_header_version(api_key: int, version: int) -> int:
    """1 or 2. For a version kio does not know, the nearest known version decides, as in
    Kafka where ``flexibleVersions`` is "N+": a too-new ApiVersions request still gets its
    v2 header parsed so that the broker can answer it. Unknown api keys read as 1 (the
    header fields common to v1 and v2 still parse)."""
    try:
        versions = known_versions(api_key)
    except ProtocolError:
        return 1
    nearest = min(max(version, versions[0]), versions[-1])
    cls = request_class(api_key, nearest)
    return int(cls.__header_schema__.__version__)  # type: ignore[attr-defined]


def response_header_version(api_key: int, version: int) -> int:
    """0 or 1; every ApiVersions response uses 0 (kio's ``__header_schema__`` says so)."""
    cls = response_class(api_key, version)
    return int(cls.__header_schema__.__version__)  # type: ignore[attr-defined]
