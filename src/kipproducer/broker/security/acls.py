"""ACL bindings and filters with Kafka's codes, names and matching rules.

A binding says: ``principal`` from ``host`` is ALLOWed / DENYed ``operation`` on the resources
of ``resource_type`` named ``resource_name`` (LITERAL: exactly that name, or every name when it
is ``*``; PREFIXED: every name starting with it). Filters (DescribeAcls, DeleteAcls,
``kip acls --list/--remove``) use ANY for "whatever value", None for any name / principal /
host, and pattern type MATCH for "every binding that applies to this resource name".

The wire codes are Kafka's (org.apache.kafka.common.acl / resource), plus ReplicatorWrite = 29
from the kipproducer wire contract (docs/protocol.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
WILDCARD_PRINCIPAL = "User:*"


class _Named(IntEnum):
    """An IntEnum whose members parse from Kafka's spellings: ``Write``, ``WRITE``, ``write``."""

    @classmethod
    def parse(cls, value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, int):
            return cls(value)
        key = str(value).replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        names = ", ".join(m.kafka_name for m in cls if m > 1)
        raise ValueError(f"unknown {cls.__name__} {value!r}; known: {names}")

    @property
    def kafka_name(self) -> str:
        """Kafka's CamelCase display name (``DescribeConfigs``, ``TransactionalId``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    REPLICATOR_WRITE = 29  # docs/protocol.md §5: produce with offsets (KIP-391), on the Cluster


class AclPermission(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations that make sense per resource type (Kafka's AclEntry.supportedOperations, plus
#: ReplicatorWrite on the Cluster). ALL is accepted everywhere.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
    }),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.REPLICATOR_WRITE,
    }),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}

#: An ALLOW for any of these also allows DESCRIBE (ALLOW only: a DENY READ denies no DESCRIBE).
IMPLIES_DESCRIBE = frozenset({
    AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
    AclOperation.ALTER,
})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def check_principal(principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"principal {principal!r} is not of the form Type:name (e.g. User:alice)")


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    @classmethod
    def of(
        cls,
        resource_type: Any,
        resource_name: str,
        principal: str,
        operation: Any,
        permission: Any = "Allow",
        *,
        pattern_type: Any = "Literal",
        host: str = WILDCARD,
    ) -> AclBinding:
        """A validated binding from names or codes: ``AclBinding.of("Topic", "t", "User:a",
        "Write")``."""
        binding = cls(
            ResourceType.parse(resource_type),
            resource_name,
            PatternType.parse(pattern_type),
            principal,
            host,
            AclOperation.parse(operation),
            AclPermission.parse(permission),
        )
        problem = binding.problem()
        if problem:
            raise ValueError(problem)
        return binding

    def problem(self) -> str | None:
        """Why this binding cannot be stored (Kafka's rules), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"resource type {self.resource_type.kafka_name} is not a concrete type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"pattern type must be Literal or Prefixed, not {self.pattern_type.kafka_name}"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"operation {self.operation.kafka_name} is not a concrete operation"
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            return f"permission must be Allow or Deny, not {self.permission.kafka_name}"
        if not self.resource_name:
            return "the resource name cannot be empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the only valid name for the Cluster resource is {CLUSTER_NAME}"
        if (self.operation != AclOperation.ALL
                and self.operation not in SUPPORTED_OPERATIONS[self.resource_type]):
            allowed = sorted(op.kafka_name for op in SUPPORTED_OPERATIONS[self.resource_type])
            return (f"operation {self.operation.kafka_name} does not apply to "
                    f"{self.resource_type.kafka_name} resources; use one of "
                    f"{', '.join(allowed)} or All")
        try:
            check_principal(self.principal)
        except ValueError as exc:
            return str(exc)
        if not self.host:
            return "the host cannot be empty (use * for every host)"
        return None

    def matches_name(self, name: str) -> bool:
        """Does this binding apply to the resource ``name`` (of its own type)?"""
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.kafka_name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.kafka_name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.kafka_name,
            "permission": self.permission.kafka_name,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AclBinding:
        return cls.of(
            doc["resource_type"], doc["resource_name"], doc["principal"], doc["operation"],
            doc["permission"], pattern_type=doc["pattern_type"], host=doc["host"],
        )

    def __str__(self) -> str:
        return (f"{self.permission.kafka_name} {self.principal} {self.operation.kafka_name} "
                f"from host {self.host} on {self.resource_type.kafka_name}:"
                f"{self.pattern_type.kafka_name}:{self.resource_name}")


@dataclass(frozen=True)
class AclFilter:
    """Which bindings a DescribeAcls / DeleteAcls / ``kip acls`` call is about."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def problem(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN:
            return "the filter's resource type is UNKNOWN"
        if self.pattern_type == PatternType.UNKNOWN:
            return "the filter's pattern type is UNKNOWN"
        if self.operation == AclOperation.UNKNOWN:
            return "the filter's operation is UNKNOWN"
        if self.permission == AclPermission.UNKNOWN:
            return "the filter's permission type is UNKNOWN"
        if self.pattern_type == PatternType.MATCH and self.resource_name is None:
            return "pattern type MATCH needs a resource name"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if not self._matches_pattern(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation not in (AclOperation.ANY, b.operation):
            return False
        return self.permission in (AclPermission.ANY, b.permission)

    def _matches_pattern(self, b: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == PatternType.MATCH:
            # Every binding that applies to the named resource: its literal, the wildcard and
            # every prefix of it (a filter name of "*" means the wildcard literal only).
            assert name is not None
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name in (name, WILDCARD)
            return name != WILDCARD and name.startswith(b.resource_name)
        if self.pattern_type not in (PatternType.ANY, b.pattern_type):
            return False
        return name is None or name == b.resource_name
