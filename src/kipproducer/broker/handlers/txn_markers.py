"""WriteTxnMarkers: end-transaction markers written on request.

In a Kafka cluster the transaction coordinator sends this request to partition leaders. Here
the coordinator writes its markers itself (one node), so the request only comes from
operators: ``kip transactions abort`` (like kafka-transactions.sh, KIP-664) closes a *hanging*
transaction, one whose data sits in a partition while no coordinator will ever end it, which
holds the partition's last stable offset back and stalls every read_committed consumer.

Rules as Kafka's: ClusterAction on the Cluster, else CLUSTER_AUTHORIZATION_FAILED for every
partition; an unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION; a marker with an
epoch older than the producer's in that partition gets INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import logging

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import WRITE_TXN_MARKERS
from ..api import RequestContext, handles
from ..producer_state import ProducerStateError
from ..security.acls import AclOperation
from ..security.checks import on_cluster
from ..storage.errors import StorageError
from .common import logs_of, partition_log

log = logging.getLogger("kipproducer.broker")



def _write_one(ctx: RequestContext, marker, topic: str, index: int) -> int:
    logs = logs_of(ctx)
    partition, code = partition_log(logs, logs.topics().get(topic), topic, index)
    if partition is None:
        return code
    try:
        partition.append_marker(
            marker.producer_id,
            marker.producer_epoch,
            commit=bool(marker.transaction_result),
            coordinator_epoch=marker.coordinator_epoch,
        )
    except ProducerStateError as exc:
        return exc.error_code
    except StorageError as exc:
        log.warning("transaction marker for %s-%d failed: %s", topic, index, exc)
        return ec.KAFKA_STORAGE_ERROR
    log.info(
        "%s wrote a%s marker for producer %d epoch %d to %s-%d (%s)",
        ctx.principal, " commit" if marker.transaction_result else "n abort",
        marker.producer_id, marker.producer_epoch, topic, index, ctx.client_id)
    return ec.NONE


@handles(WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, body):
    allowed = on_cluster(ctx, AclOperation.CLUSTER_ACTION)
    results = []
    wrote = False
    for marker in body.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                code = (_write_one(ctx, marker, topic.name, index) if allowed
                        else ec.CLUSTER_AUTHORIZATION_FAILED)
                wrote = wrote or code == ec.NONE
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": topic.name, "partitions": partitions})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    if wrote:
        ctx.broker.notify_appended()  # read_committed fetches waiting at the LSO move on
    return build_response(WRITE_TXN_MARKERS, ctx.api_version, markers=results)
