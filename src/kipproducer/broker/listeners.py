"""The broker's listeners: Kafka's ``listeners`` property (``PROTOCOL://host:port,...``).

Each listener is named after its security protocol, as Kafka's defaults name them:
PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL. Without ``listeners`` the broker has the one
``--listen`` address, SASL_PLAINTEXT when ``sasl.enabled.mechanisms`` is set and PLAINTEXT
otherwise; with both, ``--listen``'s address is one more listener of that kind.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from .broker_config import BrokerConfig, BrokerConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ListenerSpec:
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def parse_listeners(text: str) -> list[ListenerSpec]:
    specs: list[ListenerSpec] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        protocol, sep, address = part.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise BrokerConfigError(
                f"listeners: {part!r} is not PROTOCOL://host:port")
        protocol = protocol.strip().upper()
        if protocol not in PROTOCOLS:
            raise BrokerConfigError(
                f"listeners: unknown listener {protocol!r}; this broker names its listeners "
                f"after their protocol: {', '.join(PROTOCOLS)}")
        if any(s.protocol == protocol for s in specs):
            raise BrokerConfigError(f"listeners: {protocol} is listed twice")
        specs.append(ListenerSpec(protocol, host.strip("[]"), int(port)))
    return specs


def broker_listeners(config: BrokerConfig, host: str, port: int,
                     listen_given: bool) -> list[ListenerSpec]:
    """Every listener the broker opens, the first being the one ``bootstrap_servers`` names."""
    legacy = "SASL_PLAINTEXT" if config.sasl_enabled_mechanisms.strip() else "PLAINTEXT"
    specs = parse_listeners(config.listeners)
    if not specs:
        return [ListenerSpec(legacy, host, port)]
    if listen_given:
        if any(s.protocol == legacy for s in specs):
            raise BrokerConfigError(
                f"--listen adds a {legacy} listener, and listeners names one too")
        specs.insert(0, ListenerSpec(legacy, host, port))
    if any(s.sasl for s in specs) and not config.sasl_enabled_mechanisms.strip():
        raise BrokerConfigError(
            "a SASL_PLAINTEXT or SASL_SSL listener needs sasl.enabled.mechanisms")
    return specs


def advertised(config: BrokerConfig, specs: list[ListenerSpec]) -> dict[str, tuple[str, int]]:
    """``advertised.listeners``: protocol -> (host, port) clients are told; each names a
    listener of ``listeners``."""
    found: dict[str, tuple[str, int]] = {}
    for spec in parse_listeners(config.advertised_listeners):
        if not any(s.protocol == spec.protocol for s in specs):
            raise BrokerConfigError(
                f"advertised.listeners: {spec.protocol} is not a listener of this broker")
        if spec.port == 0:
            raise BrokerConfigError(f"advertised.listeners: {spec.protocol} needs a port")
        found[spec.protocol] = (spec.host, spec.port)
    return found


def tls_context(config: BrokerConfig, specs: list[ListenerSpec]) -> ssl.SSLContext | None:
    """The server SSLContext when a listener uses TLS (BrokerConfigError when it cannot be
    built), else None."""
    if not any(s.tls for s in specs):
        return None
    from .security.tls import server_context

    return server_context(config)
