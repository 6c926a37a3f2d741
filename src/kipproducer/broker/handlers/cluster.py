"""ApiVersions, Metadata and DescribeCluster: what the cluster looks like."""

from __future__ import annotations

import logging

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ..api import RequestContext, handles
from ..server import api_versions_table
from ..storage.errors import InvalidTopicError, TopicExistsError
from .common import AUTHORIZED_OPERATIONS_OMITTED, LEADER_EPOCH, logs_of

log = logging.getLogger("kipproducer.broker")

API_VERSIONS, METADATA, DESCRIBE_CLUSTER = 18, 3, 60


@handles(API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, body):
    return build_response(
        API_VERSIONS, ctx.api_version, api_keys=api_versions_table(), **_features(ctx.api_version)
    )


def _features(version: int) -> dict:
    # The KIP extensions are advertised here once the broker implements them (KIP-WIRE §1).
    return {}


def partition_metadata(ctx: RequestContext, partitions: int) -> list[dict]:
    node = ctx.broker.node_id
    return [
        {
            "error_code": ec.NONE,
            "partition_index": p,
            "leader_id": node,
            "leader_epoch": LEADER_EPOCH,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
            "offline_replicas": (),
        }
        for p in range(partitions)
    ]


def _maybe_create(ctx: RequestContext, name: str, allowed: bool):
    """Kafka creates an unknown topic a client asks metadata for, if both sides allow it."""
    logs = logs_of(ctx)
    if not (allowed and ctx.broker.config.auto_create_topics_enable):
        return None
    try:
        return logs.create_topic(name, ctx.broker.config.num_partitions)
    except TopicExistsError:
        return logs.topic(name)
    except InvalidTopicError:
        return None


@handles(METADATA, 0, 12)
async def metadata(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    topics = logs.topics()
    if body.topics is None or (v == 0 and not body.topics):
        wanted = sorted(topics)
        requested = False
    else:
        wanted = [t.name for t in body.topics]
        requested = True
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    out = []
    for name in wanted:
        info = topics.get(name) if name is not None else None
        if info is None and requested and name:
            info = _maybe_create(ctx, name, allow_create)
        if info is None:
            out.append(
                {"error_code": ec.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": ()}
            )
            continue
        out.append(
            {
                "error_code": ec.NONE,
                "name": info.name,
                "topic_id": info.topic_id,
                "is_internal": False,
                "partitions": partition_metadata(ctx, info.partitions),
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    broker = ctx.broker
    return build_response(
        METADATA,
        v,
        brokers=[
            {
                "node_id": broker.node_id,
                "host": broker.advertised_host,
                "port": broker.advertised_port,
                "rack": None,
            }
        ],
        cluster_id=broker.config.cluster_id,
        controller_id=broker.node_id,
        topics=out,
        **(
            {"cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED} if 8 <= v <= 10 else {}
        ),
    )


@handles(DESCRIBE_CLUSTER, 0, 1)
async def describe_cluster(ctx: RequestContext, body):
    broker = ctx.broker
    return build_response(
        DESCRIBE_CLUSTER,
        ctx.api_version,
        cluster_id=broker.config.cluster_id,
        controller_id=broker.node_id,
        brokers=[
            {
                "broker_id": broker.node_id,
                "host": broker.advertised_host,
                "port": broker.advertised_port,
                "rack": None,
            }
        ],
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
