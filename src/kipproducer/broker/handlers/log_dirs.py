"""DescribeLogDirs and AlterReplicaLogDirs: the broker's one log directory, its data dir.

Every partition lives in the data dir, so DescribeLogDirs lists that one directory with each
partition's size on disk (the bytes of its segment files, as Kafka's ``log.size``), offset lag 0
(there is no future replica catching up) and the file system's total and usable bytes (v4+).
AlterReplicaLogDirs can only name that directory: Kafka answers a path that is not one of its
``log.dirs`` with LOG_DIR_NOT_FOUND, and a move to the directory a replica is already in
changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS
from ..api import RequestContext, handles
from ..security.checks import may_alter_cluster, may_describe_cluster
from .common import logs_of

LOG_DIR_NOT_FOUND = ec.error_code("LOG_DIR_NOT_FOUND")


def log_dir_path(ctx: RequestContext) -> str:
    """The data dir as Kafka names a log dir: absolute, without a trailing separator."""
    return str(Path(logs_of(ctx).data_dir).absolute())


def _same_dir(requested: str, log_dir: str) -> bool:
    # Kafka compares absolute paths (java.io.File); "." and "//" are normalized alike here.
    return str(Path(requested).absolute()) == log_dir


@handles(DESCRIBE_LOG_DIRS, 1, 4)
async def describe_log_dirs(ctx: RequestContext, body):
    v = ctx.api_version
    fields: dict = {}
    if not may_describe_cluster(ctx):
        # v3+ has a top-level error; before it an unauthorized caller gets an empty list.
        if v >= 3:
            fields["error_code"] = ec.CLUSTER_AUTHORIZATION_FAILED
        return build_response(DESCRIBE_LOG_DIRS, v, results=(), **fields)
    logs = logs_of(ctx)
    topics = logs.topics()
    if body.topics is None:
        wanted = {(name, p) for name, info in topics.items() for p in range(info.partitions)}
    else:
        # Partitions that do not exist on this broker are left out, as in Kafka.
        wanted = {
            (t.topic, p)
            for t in body.topics
            for p in t.partitions
            if t.topic in topics and 0 <= p < topics[t.topic].partitions
        }
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in sorted(wanted):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_size": logs.get_log(topic, partition).size_in_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
        )
    result: dict = {
        "error_code": ec.NONE,
        "log_dir": log_dir_path(ctx),
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    if v >= 4:
        # Java's FileStore total and usable space: usable is what an unprivileged writer has.
        st = os.statvfs(logs.data_dir)
        result["total_bytes"] = st.f_blocks * st.f_frsize
        result["usable_bytes"] = st.f_bavail * st.f_frsize
    if v >= 3:
        fields["error_code"] = ec.NONE
    return build_response(DESCRIBE_LOG_DIRS, v, results=[result], **fields)


@handles(ALTER_REPLICA_LOG_DIRS, 1, 2)
async def alter_replica_log_dirs(ctx: RequestContext, body):
    allowed = may_alter_cluster(ctx)
    log_dir = log_dir_path(ctx)
    topics = logs_of(ctx).topics()
    codes: dict[str, dict[int, int]] = {}
    for target in body.dirs:
        for t in target.topics:
            info = topics.get(t.name)
            for p in t.partitions:
                if not allowed:
                    code = ec.CLUSTER_AUTHORIZATION_FAILED
                elif not _same_dir(target.path, log_dir):
                    code = LOG_DIR_NOT_FOUND
                elif info is None or not 0 <= p < info.partitions:
                    code = ec.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = ec.NONE  # already there: nothing to move
                codes.setdefault(t.name, {})[p] = code
    return build_response(
        ALTER_REPLICA_LOG_DIRS,
        ctx.api_version,
        results=[
            {
                "topic_name": name,
                "partitions": [
                    {"partition_index": p, "error_code": code} for p, code in parts.items()
                ],
            }
            for name, parts in codes.items()
        ],
    )
