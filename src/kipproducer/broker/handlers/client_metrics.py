"""ListClientMetricsResources (KIP-714), as a Kafka 3.9 broker answers it here: the broker keeps
no client-metrics subscriptions (IncrementalAlterConfigs does not take the CLIENT_METRICS
resource type), so the list is empty. DESCRIBE_CONFIGS on the Cluster is required, else
CLUSTER_AUTHORIZATION_FAILED, as in Kafka. The telemetry APIs themselves (71, 72) are not
advertised, as by a Kafka broker without a client metrics plugin.
"""

from __future__ import annotations

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ..api import RequestContext, handles
from ..security.acls import AclOperation
from ..security.checks import on_cluster

LIST_CLIENT_METRICS_RESOURCES = 74


@handles(LIST_CLIENT_METRICS_RESOURCES, 0, 0)
async def list_client_metrics_resources(ctx: RequestContext, body):
    allowed = on_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
    return build_response(
        LIST_CLIENT_METRICS_RESOURCES,
        ctx.api_version,
        error_code=ec.NONE if allowed else ec.CLUSTER_AUTHORIZATION_FAILED,
        config_resources=(),
    )
