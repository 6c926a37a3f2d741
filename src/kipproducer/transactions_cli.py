"""``kip transactions``: look at and repair transactions on a running broker.

The subcommands and their output columns follow Kafka's kafka-transactions.sh (KIP-664), so an
operator's habits carry over:

- ``list``: every transactional id the coordinator knows, with its producer id and state;
- ``describe --transactional-id ID``: one transaction: epoch, timeout, start, partitions;
- ``describe-producers --topic T --partition P``: the producers a partition knows, with the
  start offset of each one's open transaction (-1 when none);
- ``find-hanging``: open transactions in partitions that no coordinator will end (they hold
  the last stable offset back, so every read_committed consumer of the partition stalls);
- ``abort --topic T --partition P --start-offset N`` (or ``--producer-id/--producer-epoch/
  --coordinator-epoch``): writes an abort marker for a hanging transaction (WriteTxnMarkers).

All go to ``--bootstrap-server`` (one broker is the whole cluster here) with the SASL settings
of ``--command-config``. See docs/transactions.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from .blocking_client import (
    BlockingClient,
    RequestFailed,
    add_connection_arguments,
    print_table,
    run_tool,
)
from .protocol import error_codes as ec
from .protocol.api_keys import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    METADATA,
    WRITE_TXN_MARKERS,
)

#: kafka-transactions.sh find-hanging's default: transaction.max.timeout.ms of 15 minutes.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


class TransactionsClient(BlockingClient):
    client_id = "kip-transactions"

    def list_transactions(self, states: Sequence[str] = (),
                          producer_ids: Sequence[int] = ()) -> list[Any]:
        answer = self.request(LIST_TRANSACTIONS, 1, state_filters=list(states),
                              producer_id_filters=list(producer_ids), duration_filter=-1)
        _check(answer.error_code, "ListTransactions")
        return sorted(answer.transaction_states, key=lambda t: t.transactional_id)

    def describe_transaction(self, transactional_id: str) -> Any:
        answer = self.request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id])
        state = answer.transaction_states[0]
        _check(state.error_code, f"transactional id {transactional_id!r}")
        return state

    def describe_producers(self, topic: str, partitions: Sequence[int]) -> dict[int, list[Any]]:
        answer = self.request(DESCRIBE_PRODUCERS, 0, topics=[
            {"name": topic, "partition_indexes": list(partitions)}])
        found = {}
        for p in answer.topics[0].partitions:
            _check(p.error_code, f"{topic}-{p.partition_index}")
            found[p.partition_index] = list(p.active_producers)
        return found

    def partitions(self) -> dict[str, int]:
        """Every topic's partition count (internal topics too)."""
        answer = self.request(METADATA, 12, topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
        return {t.name: len(t.partitions) for t in answer.topics if t.error_code == ec.NONE}

    def write_abort_marker(self, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, coordinator_epoch: int) -> None:
        answer = self.request(WRITE_TXN_MARKERS, 1, markers=[{
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [partition]}],
            "coordinator_epoch": coordinator_epoch,
        }])
        _check(answer.markers[0].topics[0].partitions[0].error_code, f"{topic}-{partition}")


def _check(code: int, what: str) -> None:
    if code != ec.NONE:
        raise RequestFailed(f"{what}: {ec.error_name(code)}", code)


def _millis(value: Any) -> int:
    """A duration field as milliseconds (the codec may give a timedelta or a plain int)."""
    seconds = getattr(value, "total_seconds", None)
    return round(seconds() * 1000) if seconds is not None else int(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    # kafka-transactions.sh's columns: tab-separated, None printed as None
    print_table(header, rows, sep="\t", none="None")


# -- subcommands ---------------------------------------------------------------------------------


def _list(client: TransactionsClient, args: argparse.Namespace) -> int:
    rows = [(t.transactional_id, 0, t.producer_id, t.transaction_state)
            for t in client.list_transactions()]
    _table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), rows)
    return 0


def _describe(client: TransactionsClient, args: argparse.Namespace) -> int:
    t = client.describe_transaction(args.transactional_id)
    start = int(t.transaction_start_time)
    duration = int(time.time() * 1000) - start if start >= 0 else "None"
    partitions = ",".join(f"{topic.topic}-{p}" for topic in t.topics for p in topic.partitions)
    timeout_ms = _millis(t.transaction_timeout)
    _table(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
            "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
            "TransactionDurationMs", "TopicPartitions"),
           [(0, t.transactional_id, t.producer_id, t.producer_epoch, t.transaction_state,
             timeout_ms, start if start >= 0 else "None", duration, partitions)])
    return 0


def _describe_producers(client: TransactionsClient, args: argparse.Namespace) -> int:
    producers = client.describe_producers(args.topic, [args.partition])[args.partition]
    _table(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
            "LastTimestamp", "CurrentTransactionStartOffset"),
           [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
             p.last_timestamp, p.current_txn_start_offset) for p in producers])
    return 0


def hanging_transactions(client: TransactionsClient, max_timeout_min: float,
                         topic: str | None = None, partition: int | None = None) -> list[tuple]:
    """(topic, partition, producer) of every open transaction no coordinator will end.

    Kafka's rule: a transaction is a candidate when it has been open longer than the largest
    transaction timeout; it hangs when its producer id has no Ongoing transaction with that
    partition at the coordinator (the coordinator would otherwise have aborted it already).
    """
    now = int(time.time() * 1000)
    limit_ms = max_timeout_min * 60_000
    counts = client.partitions()
    topics = {topic: counts.get(topic, 0)} if topic is not None else counts
    hanging = []
    for name, count in sorted(topics.items()):
        wanted = [partition] if partition is not None else list(range(count))
        for index, producers in sorted(client.describe_producers(name, wanted).items()):
            for p in producers:
                if p.current_txn_start_offset < 0 or now - p.last_timestamp < limit_ms:
                    continue
                if not _coordinator_owns(client, p.producer_id, name, index):
                    hanging.append((name, index, p))
    return hanging


def _coordinator_owns(client: TransactionsClient, producer_id: int, topic: str,
                      partition: int) -> bool:
    for t in client.list_transactions(states=["Ongoing"], producer_ids=[producer_id]):
        described = client.describe_transaction(t.transactional_id)
        if any(d.topic == topic and partition in d.partitions for d in described.topics):
            return True
    return False


def _find_hanging(client: TransactionsClient, args: argparse.Namespace) -> int:
    now = int(time.time() * 1000)
    rows = [(name, index, p.producer_id, p.producer_epoch, p.coordinator_epoch,
             p.current_txn_start_offset, p.last_timestamp, (now - p.last_timestamp) // 60_000)
            for name, index, p in hanging_transactions(
                client, args.max_transaction_timeout, args.topic, args.partition)]
    _table(("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
            "StartOffset", "LastTimestamp", "Duration(min)"), rows)
    return 0


def _abort(client: TransactionsClient, args: argparse.Namespace) -> int:
    if args.start_offset is not None:
        producers = client.describe_producers(args.topic, [args.partition])[args.partition]
        matches = [p for p in producers if p.current_txn_start_offset == args.start_offset]
        if not matches:
            raise RequestFailed(
                f"no open transaction starts at offset {args.start_offset} in "
                f"{args.topic}-{args.partition} (see 'kip transactions describe-producers')")
        p = matches[0]
        producer_id, epoch, coordinator_epoch = (p.producer_id, p.producer_epoch,
                                                 max(p.coordinator_epoch, 0))
    else:
        producer_id, epoch, coordinator_epoch = (args.producer_id, args.producer_epoch,
                                                 args.coordinator_epoch)
    client.write_abort_marker(args.topic, args.partition, producer_id, epoch, coordinator_epoch)
    print(f"aborted the transaction of producer {producer_id} (epoch {epoch}) in "
          f"{args.topic}-{args.partition}")
    return 0


def cmd_transactions(args: argparse.Namespace) -> int:
    return run_tool("kip transactions", TransactionsClient, args,
                    lambda client, _config: args.action(client, args))


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("transactions", help="list, describe and abort transactions on a "
                                                 "running broker (like kafka-transactions.sh)")
    add_connection_arguments(parser)
    actions = parser.add_subparsers(dest="transactions_command", required=True)
    actions.add_parser("list", help="every transactional id with its state"
                       ).set_defaults(action=_list)
    describe = actions.add_parser("describe", help="one transaction")
    describe.add_argument("--transactional-id", required=True,
                          help="the transactional.id to describe")
    describe.set_defaults(action=_describe)
    producers = actions.add_parser("describe-producers", help="the producers of a partition")
    producers.add_argument("--topic", required=True, help="the partition's topic")
    producers.add_argument("--partition", required=True, type=int, help="the partition")
    producers.set_defaults(action=_describe_producers)
    hanging = actions.add_parser("find-hanging", help="open transactions no coordinator ends")
    hanging.add_argument("--topic", help="look at this topic only (default: every topic)")
    hanging.add_argument("--partition", type=int,
                         help="with --topic: look at this partition only")
    hanging.add_argument("--max-transaction-timeout", type=float,
                         default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN, metavar="MINUTES",
                         help="open longer than this counts as a candidate (default 15)")
    hanging.set_defaults(action=_find_hanging)
    abort = actions.add_parser("abort", help="write an abort marker for a hanging transaction")
    abort.add_argument("--topic", required=True, help="the hanging transaction's topic")
    abort.add_argument("--partition", required=True, type=int,
                       help="the hanging transaction's partition")
    abort.add_argument("--start-offset", type=int,
                       help="the first offset of the open transaction (describe-producers)")
    abort.add_argument("--producer-id", type=int,
                       help="instead of --start-offset: the open transaction's producer id")
    abort.add_argument("--producer-epoch", type=int,
                       help="with --producer-id: that producer's epoch")
    abort.add_argument("--coordinator-epoch", type=int, default=0,
                       help="coordinator epoch written in the marker (default 0)")
    abort.set_defaults(action=_abort)

    def check_abort(args: argparse.Namespace) -> int:
        if args.action is _abort and (args.start_offset is None) == (args.producer_id is None):
            print("kip transactions abort: give --start-offset, or --producer-id with "
                  "--producer-epoch", file=sys.stderr)
            return 2
        if args.action is _abort and args.producer_id is not None and args.producer_epoch is None:
            print("kip transactions abort: --producer-id needs --producer-epoch",
                  file=sys.stderr)
            return 2
        return cmd_transactions(args)

    parser.set_defaults(func=check_abort)
