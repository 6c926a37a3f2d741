"""BrokerSecurity: a broker's SASL settings, user store, ACL store and authorizer in one place.

Built from the broker config when the Broker is constructed (bad values raise
BrokerConfigError before anything starts); :meth:`open` reads the users and ACL files when the
broker starts, so a corrupt file stops the start with a clear message instead of a broker
that silently allows or refuses everything.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..broker_config import BrokerConfig, BrokerConfigError
from .acls import WILDCARD, AclOperation, ResourceType
from .authorizer import AclStore, Authorizer, parse_super_users
from .sasl import ANONYMOUS, SUPPORTED_MECHANISMS, SaslConfig, SaslSession, State
from .tls import NoMappingRule, parse_mapping_rules, principal_name, subject_dn
from .users import UserStore

log = logging.getLogger("kipproducer.broker.security")


def parse_mechanisms(text: str | None) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms``: comma-separated, Kafka's exact (upper-case) names."""
    mechanisms: list[str] = []
    for part in (text or "").split(","):
        name = part.strip()
        if not name:
            continue
        if name not in SUPPORTED_MECHANISMS:
            raise BrokerConfigError(
                f"sasl.enabled.mechanisms: unsupported mechanism {name!r}; this broker "
                f"supports {', '.join(SUPPORTED_MECHANISMS)}"
            )
        if name not in mechanisms:
            mechanisms.append(name)
    return tuple(mechanisms)


class BrokerSecurity:
    def __init__(self, data_dir: str | os.PathLike[str], config: BrokerConfig) -> None:
        self.mechanisms = parse_mechanisms(config.sasl_enabled_mechanisms)
        try:
            super_users = parse_super_users(config.super_users)
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None
        self.users = UserStore(data_dir)
        self.acls = AclStore(data_dir)
        self.sasl = SaslConfig(self.mechanisms, self.users, config.connections_max_reauth_ms)
        self.principal_rules = parse_mapping_rules(config.ssl_principal_mapping_rules)
        enabled = config.authorizer_enabled or bool((config.authorizer_class_name or "").strip())
        self.authorizer: Authorizer | None = (
            Authorizer(
                self.acls,
                super_users=super_users,
                allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
            )
            if enabled
            else None
        )

    def open(self) -> None:
        """Read the users and ACL files (StoreError if one is corrupt) and say what is on."""
        self.users.load()
        self.acls.load()
        if self.mechanisms:
            log.info("SASL required on the listener: %s (%d users)",
                     ", ".join(self.mechanisms), len(self.users.users()))
        if self.authorizer is not None:
            log.info("authorizer on: %d ACL bindings, super users: %s, "
                     "allow.everyone.if.no.acl.found=%s", len(self.acls.list()),
                     ", ".join(sorted(self.authorizer.super_users)) or "none",
                     str(self.authorizer.allow_everyone_if_no_acl_found).lower())

    def new_session(self, conn_id: int, host: str, listener: Any = None,
                    peercert: dict | None = None) -> SaslSession:
        """A connection's session. On an SSL listener a client certificate names the principal
        (ssl.principal.mapping.rules); SASL listeners ask the SASL exchange."""
        spec = getattr(listener, "spec", None)
        if spec is None:  # one listener, as before listeners= existed
            return SaslSession(self.sasl, conn_id, host, listener=listener)
        principal = ANONYMOUS
        failure = None
        if spec.protocol == "SSL" and peercert:
            dn = subject_dn(peercert)
            try:
                principal = "User:" + principal_name(dn, self.principal_rules)
            except NoMappingRule as exc:
                failure = str(exc)
        session = SaslSession(self.sasl, conn_id, host, sasl=spec.sasl, principal=principal,
                              listener=listener)
        if failure is not None:
            log.warning("connection %s from %s: %s; closing", conn_id, host, failure)
            session.state = State.FAILED
        return session

    def authorize(
        self, principal: str, operation: Any, resource_type: Any, name: str,
        host: str = WILDCARD,
    ) -> bool:
        """Operation and resource type by enum, code or Kafka name (``"Write"``, ``"Topic"``)."""
        if self.authorizer is None:
            return True  # Kafka without an authorizer allows everything
        return self.authorizer.authorize(
            principal, AclOperation.parse(operation), ResourceType.parse(resource_type), name,
            host,
        )

    def authorize_any(
        self, principal: str, operation: Any, resource_type: Any, host: str = WILDCARD
    ) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_any(
            principal, AclOperation.parse(operation), ResourceType.parse(resource_type), host
        )
