"""InitProducerId and the transaction APIs, translated to the TransactionCoordinator's calls.

Served as Kafka 3.9 serves them under transaction version 1 (the broker does not advertise the
``transaction.version`` feature): AddPartitionsToTxn v0-3 from producers and v4-5, the
batched broker-to-broker form (add or verify_only per transaction, CLUSTER_ACTION required),
AddOffsetsToTxn v0-4 (v4 only allows the TRANSACTION_ABORTABLE error), EndTxn v0-4 (v5 bumps
the epoch per transaction, TV2), DescribeTransactions v0, ListTransactions v0-1.

Authorization and the per-version error mapping are KafkaApis' rules: WRITE on the
TransactionalId for everything a producer sends (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
DESCRIBE for the admin APIs; clients older than KIP-588 (InitProducerId < 4, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn < 2) get INVALID_PRODUCER_EPOCH where newer ones get
PRODUCER_FENCED.
"""

from __future__ import annotations

import logging

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
)
from ..api import RequestContext, handles
from ..security.acls import AclOperation
from ..security.checks import (
    may_describe_topic,
    may_describe_transactional_id,
    may_read_group,
    may_write_idempotently,
    may_write_topic,
    may_write_transactional_id,
    on_cluster,
)
from ..storage.errors import StorageError
from ..transactions import TransactionCoordinator
from .common import logs_of

log = logging.getLogger("kipproducer.broker")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _fenced_for(version: int, first_version_with_producer_fenced: int, code: int) -> int:
    """KIP-588: clients before ``first_version_with_producer_fenced`` do not know
    PRODUCER_FENCED; they are told INVALID_PRODUCER_EPOCH, which they handle alike."""
    if code == ec.PRODUCER_FENCED and version < first_version_with_producer_fenced:
        return ec.INVALID_PRODUCER_EPOCH
    return code


def _coordinator(ctx: RequestContext) -> TransactionCoordinator | None:
    return ctx.broker.transactions


# -- InitProducerId ---------------------------------------------------------------------------


def _init_answer(ctx: RequestContext, code: int, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH):
    return build_response(INIT_PRODUCER_ID, ctx.api_version,
                          error_code=_fenced_for(ctx.api_version, 4, code),
                          producer_id=producer_id, producer_epoch=producer_epoch)


@handles(INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, body):
    transactional_id = body.transactional_id
    if transactional_id is not None:
        if not may_write_transactional_id(ctx, transactional_id):
            return _init_answer(ctx, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not may_write_idempotently(ctx):
        return _init_answer(ctx, ec.CLUSTER_AUTHORIZATION_FAILED)
    expected = None
    if ctx.api_version >= 3:
        named = (body.producer_id, body.producer_epoch)
        if named != (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
            if named[0] == NO_PRODUCER_ID or named[1] == NO_PRODUCER_EPOCH:
                return _init_answer(ctx, ec.INVALID_REQUEST)  # one without the other
            expected = named
    if transactional_id is None:
        # An idempotent producer always gets a fresh id, epoch 0, as Kafka's coordinator does,
        # also when it asks to bump the epoch of its old id (KIP-360).
        try:
            producer_id = logs_of(ctx).allocate_producer_id()
        except StorageError as exc:  # a disk fault: the client retries
            log.error("InitProducerId: %s", exc)
            return _init_answer(ctx, ec.COORDINATOR_NOT_AVAILABLE)
        return _init_answer(ctx, ec.NONE, producer_id, 0)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return _init_answer(ctx, ec.COORDINATOR_NOT_AVAILABLE)
    result = await coordinator.init_producer_id(
        transactional_id, int(body.transaction_timeout), expected)
    return _init_answer(ctx, result.error_code, result.producer_id, result.producer_epoch)


# -- AddPartitionsToTxn -----------------------------------------------------------------------


def _partition_errors(ctx: RequestContext, topics) -> tuple[dict, bool]:
    """{(topic, partition): code} after the topic checks, and whether any partition failed.

    Kafka's rule: any failed partition fails the request; the partitions that passed are
    answered OPERATION_NOT_ATTEMPTED, as they were not added."""
    logs = logs_of(ctx)
    known = logs.topics()
    codes: dict[tuple[str, int], int] = {}
    failed = False
    for topic in topics:
        writable = may_write_topic(ctx, topic.name)
        info = known.get(topic.name)
        for partition in topic.partitions:
            if not writable:
                code = ec.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= partition < info.partitions:
                code = ec.UNKNOWN_TOPIC_OR_PARTITION
            else:
                code = ec.NONE
            failed = failed or code != ec.NONE
            codes[(topic.name, partition)] = code
    if failed:
        codes = {tp: code if code != ec.NONE else ec.OPERATION_NOT_ATTEMPTED
                 for tp, code in codes.items()}
    return codes, failed


def _add_partitions_answer(ctx: RequestContext, codes: dict[tuple[str, int], int]):
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": code})
    return build_response(
        ADD_PARTITIONS_TO_TXN, ctx.api_version,
        results_by_topic_v3_and_below=[
            {"name": topic, "results_by_partition": results}
            for topic, results in by_topic.items()
        ],
    )


async def _add_for_client(ctx: RequestContext, body):
    """v0-3: one transaction from its producer, WRITE on the id and on each topic."""
    transactional_id = body.v3_and_below_transactional_id
    requested = {(t.name, p): ec.NONE for t in body.v3_and_below_topics for p in t.partitions}
    if not may_write_transactional_id(ctx, transactional_id):
        return _add_partitions_answer(
            ctx, dict.fromkeys(requested, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    codes, failed = _partition_errors(ctx, body.v3_and_below_topics)
    if failed:
        return _add_partitions_answer(ctx, codes)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        code = ec.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coordinator.add_partitions(
            transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            list(codes))
    return _add_partitions_answer(
        ctx, dict.fromkeys(codes, _fenced_for(ctx.api_version, 2, code)))


async def _add_one_batched(ctx: RequestContext, txn) -> dict[tuple[str, int], int]:
    """One transaction of a v4+ request: topics need no WRITE (the sender is a broker with
    CLUSTER_ACTION), unknown partitions fail the transaction as in v0-3."""
    requested = [(t.name, p) for t in txn.topics for p in t.partitions]
    known = logs_of(ctx).topics()
    missing = {tp for tp in requested
               if tp[0] not in known or not 0 <= tp[1] < known[tp[0]].partitions}
    if missing:
        return {tp: ec.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else ec.OPERATION_NOT_ATTEMPTED
                for tp in requested}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return dict.fromkeys(requested, ec.COORDINATOR_NOT_AVAILABLE)
    if txn.verify_only:
        return coordinator.verify_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, requested)
    code = await coordinator.add_partitions(
        txn.transactional_id, txn.producer_id, txn.producer_epoch, requested)
    return dict.fromkeys(requested, code)


async def _add_batched(ctx: RequestContext, body):
    """v4-5 (KIP-890 part 1): the broker-to-broker form, many transactions per request, each
    either added or only verified; the sender needs CLUSTER_ACTION on the Cluster."""
    if not on_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return build_response(ADD_PARTITIONS_TO_TXN, ctx.api_version,
                              error_code=ec.CLUSTER_AUTHORIZATION_FAILED,
                              results_by_transaction=())
    results = []
    for txn in body.transactions:
        codes = await _add_one_batched(ctx, txn)
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "partition_error_code": code})
        results.append({
            "transactional_id": txn.transactional_id,
            "topic_results": [{"name": t, "results_by_partition": ps}
                              for t, ps in by_topic.items()],
        })
    return build_response(ADD_PARTITIONS_TO_TXN, ctx.api_version, error_code=ec.NONE,
                          results_by_transaction=results)


@handles(ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, body):
    if ctx.api_version >= 4:
        return await _add_batched(ctx, body)
    return await _add_for_client(ctx, body)


# -- AddOffsetsToTxn --------------------------------------------------------------------------


@handles(ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, body):
    if not may_write_transactional_id(ctx, body.transactional_id):
        code = ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not may_read_group(ctx, body.group_id):
        code = ec.GROUP_AUTHORIZATION_FAILED
    elif (coordinator := _coordinator(ctx)) is None:
        code = ec.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coordinator.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
    return build_response(ADD_OFFSETS_TO_TXN, ctx.api_version,
                          error_code=_fenced_for(ctx.api_version, 2, code))


# -- EndTxn -----------------------------------------------------------------------------------


@handles(END_TXN, 0, 4)
async def end_txn(ctx: RequestContext, body):
    if not may_write_transactional_id(ctx, body.transactional_id):
        code = ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif (coordinator := _coordinator(ctx)) is None:
        code = ec.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coordinator.end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed))
    return build_response(END_TXN, ctx.api_version,
                          error_code=_fenced_for(ctx.api_version, 2, code))


# -- DescribeTransactions / ListTransactions --------------------------------------------------


@handles(DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, body):
    coordinator = _coordinator(ctx)
    states = []
    for transactional_id in body.transactional_ids:
        if not may_describe_transactional_id(ctx, transactional_id):
            states.append({"transactional_id": transactional_id,
                           "error_code": ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
            continue
        if coordinator is None:
            states.append({"transactional_id": transactional_id,
                           "error_code": ec.COORDINATOR_NOT_AVAILABLE})
            continue
        found = coordinator.describe(transactional_id)
        if found.error_code != ec.NONE:
            states.append({"transactional_id": transactional_id,
                           "error_code": found.error_code})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(found.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append({
            "transactional_id": transactional_id,
            "error_code": ec.NONE,
            "transaction_state": found.state,
            "transaction_timeout": found.timeout_ms,
            "transaction_start_time": found.start_ms,
            "producer_id": found.producer_id,
            "producer_epoch": found.producer_epoch,
            # Only the topics the principal may describe, as KafkaApis filters them.
            "topics": [{"topic": topic, "partitions": partitions}
                       for topic, partitions in by_topic.items()
                       if may_describe_topic(ctx, topic)],
        })
    return build_response(DESCRIBE_TRANSACTIONS, ctx.api_version, transaction_states=states)


@handles(LIST_TRANSACTIONS, 0, 1)
async def list_transactions(ctx: RequestContext, body):
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return build_response(LIST_TRANSACTIONS, ctx.api_version,
                              error_code=ec.COORDINATOR_NOT_AVAILABLE)
    duration = body.duration_filter if ctx.api_version >= 1 else -1
    found, unknown = coordinator.list_transactions(
        body.state_filters, body.producer_id_filters, duration)
    return build_response(
        LIST_TRANSACTIONS, ctx.api_version,
        error_code=ec.NONE,
        unknown_state_filters=unknown,
        transaction_states=[
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
             "transaction_state": t.state}
            for t in found if may_describe_transactional_id(ctx, t.transactional_id)
        ],
    )
