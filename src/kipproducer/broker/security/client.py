"""The client side of the security APIs (CreateAcls, DescribeAcls, DeleteAcls).

``kip acls --bootstrap-server`` uses it: stock admin clients cannot send the ReplicatorWrite
operation (29), which librdkafka's AclOperation enum does not know.
"""

from __future__ import annotations

from typing import Any

from kipproducer.blocking_client import BlockingClient, RequestFailed, read_client_properties
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from .acls import AclBinding, AclFilter, AclOperation, AclPermission, PatternType, ResourceType

__all__ = ["RequestFailed", "SecurityClient", "read_client_properties"]



class SecurityClient(BlockingClient):
    client_id = "kip-acls"

    # -- ACLs ------------------------------------------------------------------------------------

    def create_acls(self, bindings: list[AclBinding]) -> None:
        answer = self.request(CREATE_ACLS, 3, creations=[
            {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
             "resource_pattern_type": int(b.pattern_type), "principal": b.principal,
             "host": b.host, "operation": int(b.operation),
             "permission_type": int(b.permission)}
            for b in bindings])
        problems = [f"{b}: {ec.error_name(r.error_code)} {r.error_message or ''}".rstrip()
                    for b, r in zip(bindings, answer.results, strict=True) if r.error_code]
        if problems:
            raise RequestFailed("; ".join(problems))

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        answer = self.request(DESCRIBE_ACLS, 3, **_filter_fields(acl_filter))
        if answer.error_code:
            raise RequestFailed(f"{ec.error_name(answer.error_code)}: {answer.error_message}")
        return sorted(
            AclBinding(ResourceType(r.resource_type), r.resource_name,
                       PatternType(r.pattern_type), a.principal, a.host,
                       AclOperation(a.operation), AclPermission(a.permission_type))
            for r in answer.resources for a in r.acls)

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        answer = self.request(DELETE_ACLS, 3, filters=[_filter_fields(f) for f in filters])
        removed = []
        for result in answer.filter_results:
            if result.error_code:
                raise RequestFailed(f"{ec.error_name(result.error_code)}: "
                                    f"{result.error_message}")
            removed += [
                AclBinding(ResourceType(m.resource_type), m.resource_name,
                           PatternType(m.pattern_type), m.principal, m.host,
                           AclOperation(m.operation), AclPermission(m.permission_type))
                for m in result.matching_acls]
        return sorted(set(removed))


def _filter_fields(f: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission),
    }
