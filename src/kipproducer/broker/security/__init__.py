"""Authentication (SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512) and authorization (ACLs).

- SCRAM credentials and exchanges live in :mod:`kipproducer.sasl.scram`, shared with the
  engine's client connections (RFC 5802, RFC 7677);
- ``users``: the durable user store, ``<data dir>/security/users.json``;
- ``acls``: ACL bindings and filters, Kafka's codes and matching rules;
- ``authorizer``: the durable ACL store, ``<data dir>/security/acls.json``, and the decisions;
- ``sasl``: the per-connection SASL state machine;
- ``broker_security``: all of it, configured from the broker properties;
- ``checks``: one helper per authorization check, for the request handlers.

See docs/security.md. Offline tools use :class:`UserStore` and :class:`AclStore` on a data dir;
a running broker picks their changes up.
"""

from .acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from .authorizer import AclStore, Authorizer
from .errors import AuthenticationFailed, MalformedToken, SecurityError, StoreError
from .users import UserStore

__all__ = [
    "AclBinding",
    "AclFilter",
    "AclOperation",
    "AclPermission",
    "AclStore",
    "AuthenticationFailed",
    "Authorizer",
    "MalformedToken",
    "PatternType",
    "ResourceType",
    "SecurityError",
    "StoreError",
    "UserStore",
]
