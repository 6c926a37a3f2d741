"""ApiVersions, Metadata and DescribeCluster: what the cluster looks like."""

from __future__ import annotations

import logging

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec
from kipproducer.protocol.wire_extensions import (
    FEATURE_MAX_VERSION,
    FEATURE_MIN_VERSION,
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_KEY_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    KEY_CONDITIONAL_WIRE_VERSION,
)

from ...protocol.api_keys import API_VERSIONS, DESCRIBE_CLUSTER, METADATA
from ..api import RequestContext, handles
from ..security.authorized_ops import cluster_operations, topic_operations
from ..security.checks import may_create_topic, may_describe_topic
from ..server import api_versions_table
from ..storage.errors import (
    InternalTopicError,
    InvalidTopicError,
    ReservedTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from ..storage.log_manager import is_internal_topic
from .common import LEADER_EPOCH, logs_of

log = logging.getLogger("kipproducer.broker")



@handles(API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, body):
    config = ctx.broker.config
    # kip.extensions.enable=false: a stand-in for stock Kafka, which announces none of ours
    features = (_features(ctx.api_version, config.kip_wire_version)
                if config.kip_extensions_enable else {})
    return build_response(
        API_VERSIONS, ctx.api_version, api_keys=api_versions_table(), **features)


def _features(version: int, wire_version: int = KEY_CONDITIONAL_WIRE_VERSION) -> dict:
    """docs/protocol.md §1: the extensions this broker implements, in SupportedFeatures (v3+).
    ``wire_version`` (kip.wire.version): the two produce modes go to MaxVersion 2 with
    several batches per partition (§9), 1 without; from 3 the per-key conditions (§10)."""
    if version < 3:
        return {}
    max_version = min(FEATURE_MAX_VERSION, wire_version)
    features = [
        {"name": FEATURE_PRODUCE_OFFSETS, "min_version": FEATURE_MIN_VERSION,
         "max_version": max_version},
        {"name": FEATURE_PRODUCE_CONDITIONAL, "min_version": FEATURE_MIN_VERSION,
         "max_version": max_version},
    ]
    if wire_version >= KEY_CONDITIONAL_WIRE_VERSION:
        features.append({"name": FEATURE_PRODUCE_KEY_CONDITIONAL, "min_version": 1,
                         "max_version": 1})
    return {"supported_features": features}


def partition_metadata(ctx: RequestContext, partitions: int, version: int = 12) -> list[dict]:
    node = ctx.broker.node_id
    out = []
    for p in range(partitions):
        entry = {
            "error_code": ec.NONE,
            "partition_index": p,
            "leader_id": node,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
        }
        # Fields exist from the version that added them: v5 offline_replicas, v7 leader_epoch.
        if version >= 5:
            entry["offline_replicas"] = ()
        if version >= 7:
            entry["leader_epoch"] = LEADER_EPOCH
        out.append(entry)
    return out


def _maybe_create(ctx: RequestContext, name: str, allowed: bool):
    """Kafka creates an unknown topic a client asks metadata for, if both sides allow it.

    Returns (TopicInfo or None, the error code for None): an invalid name that Kafka would
    have auto-created is INVALID_TOPIC_EXCEPTION, anything not created otherwise unknown.
    """
    logs = logs_of(ctx)
    if not (allowed and ctx.broker.config.auto_create_topics_enable):
        return None, ec.UNKNOWN_TOPIC_OR_PARTITION
    if not may_create_topic(ctx, name):
        return None, ec.TOPIC_AUTHORIZATION_FAILED  # Kafka's answer when creation is refused
    try:
        return logs.create_topic(name, ctx.broker.config.num_partitions), ec.NONE
    except (InternalTopicError, ReservedTopicError):
        # Never auto-created: their data lives in the data dir's own logs.
        return None, ec.UNKNOWN_TOPIC_OR_PARTITION
    except TopicExistsError:
        return logs.topic(name), ec.NONE
    except InvalidTopicError:
        return None, ec.INVALID_TOPIC_EXCEPTION


def _by_id(logs, topic_id):
    if topic_id is None:
        return None
    try:
        return logs.topic_by_id(topic_id)
    except UnknownTopicError:
        return None


@handles(METADATA, 0, 12)
async def metadata(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    topics = logs.topics()
    if body.topics is None or (v == 0 and not body.topics):
        # All topics: those the principal may not describe are left out, as in Kafka.
        wanted = [(name, None) for name in sorted(topics) if may_describe_topic(ctx, name)]
        requested = False
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
        requested = True
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    out = []
    for name, topic_id in wanted:
        if name is None:
            # v10+ may name a topic by id only. Kafka resolves ids from v12 (an unknown id:
            # UNKNOWN_TOPIC_ID, name null) and refuses a null name before that (the v10/v11
            # response cannot carry one).
            found = _by_id(logs, topic_id) if v >= 12 else None
            if found is None:
                out.append(
                    {
                        "error_code": ec.UNKNOWN_TOPIC_ID if v >= 12 else ec.INVALID_REQUEST,
                        "name": None if v >= 12 else "",
                        "topic_id": topic_id,
                        "partitions": (),
                    }
                )
                continue
            name = found.name
            if not may_describe_topic(ctx, name):
                out.append({"error_code": ec.TOPIC_AUTHORIZATION_FAILED, "name": None,
                            "topic_id": topic_id, "partitions": ()})
                continue
        elif requested and not may_describe_topic(ctx, name):
            # Refused whether or not it exists: an unauthorized client learns nothing.
            out.append({"error_code": ec.TOPIC_AUTHORIZATION_FAILED, "name": name,
                        "partitions": ()})
            continue
        info = topics.get(name)
        if info is None and requested and name:
            info, code = _maybe_create(ctx, name, allow_create)
        else:
            code = ec.UNKNOWN_TOPIC_OR_PARTITION
        if info is None:
            missing = {"error_code": code, "name": name, "partitions": ()}
            if v >= 8 and code != ec.TOPIC_AUTHORIZATION_FAILED:
                # Kafka fills it for every topic the principal may describe, found or not.
                missing["topic_authorized_operations"] = topic_operations(
                    ctx, name, body.include_topic_authorized_operations)
            out.append(missing)
            continue
        topic = {
            "error_code": ec.NONE,
            "name": info.name,
            "partitions": partition_metadata(ctx, info.partitions, v),
        }
        # Each field only from the version that has it (v1 is_internal, v8 authorized
        # operations, v10 topic_id): build_response refuses fields a version lacks.
        if v >= 1:
            topic["is_internal"] = is_internal_topic(info.name)
        if v >= 8:
            topic["topic_authorized_operations"] = topic_operations(
                ctx, info.name, body.include_topic_authorized_operations)
        if v >= 10:
            topic["topic_id"] = info.topic_id
        out.append(topic)
    broker = ctx.broker
    node = {
        "node_id": broker.node_id,
        "host": broker.advertised_for(ctx.session)[0],
        "port": broker.advertised_for(ctx.session)[1],
    }
    fields: dict = {"brokers": [node], "topics": out}
    if v >= 1:
        node["rack"] = None
        fields["controller_id"] = broker.node_id
    if v >= 2:
        fields["cluster_id"] = broker.config.cluster_id
    if 8 <= v <= 10:
        fields["cluster_authorized_operations"] = cluster_operations(
            ctx, body.include_cluster_authorized_operations)
    return build_response(METADATA, v, **fields)


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
                "host": broker.advertised_for(ctx.session)[0],
                "port": broker.advertised_for(ctx.session)[1],
                "rack": None,
            }
        ],
        cluster_authorized_operations=cluster_operations(
            ctx, body.include_cluster_authorized_operations),
    )
