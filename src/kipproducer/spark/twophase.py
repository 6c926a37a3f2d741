"""Ending transactions that other processes began: the driver's half of the sink's two-phase
commit.

A task attempt writes through its own transactional id and leaves the transaction open
(flushed, not committed); it reports the id with its producer id and epoch. The driver then
ends exactly those transactions with EndTxn under that id and epoch
(``Producer.resume_transaction``), as Flink's Kafka sink does, and fences every other id of
the write (InitProducerId aborts an open transaction and bumps the epoch, so a zombie attempt
can no longer write under it). The ids of failed attempts are never reported to the driver:
it finds them with ListTransactions (KIP-664, Kafka 3.0+) by their common prefix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

log = logging.getLogger("kipproducer.spark")

#: Parallel EndTxn / InitProducerId calls of the driver.
THREADS = 8
#: How long the driver asks a broker that does not answer ListTransactions again (a node
#: killed stays in the metadata until the controller fences it: Kafka's default
#: broker.session.timeout.ms is 9 s), and the pause between rounds.
LIST_WAIT_S = 30.0
LIST_RETRY_BACKOFF_S = 0.5


@dataclass(frozen=True)
class OpenTransaction:
    """What a task attempt leaves for the driver: its open transaction and what it holds."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    records: int
    partition_id: int
    task_attempt_id: int


def _producer(props: Mapping[str, Any], transactional_id: str, timeout_ms: int):
    from ..producer import Producer

    return Producer({**props, "transactional.id": transactional_id,
                     "transaction.timeout.ms": timeout_ms})


def end(props: Mapping[str, Any], txn: OpenTransaction, commit: bool, timeout_ms: int) -> None:
    """EndTxn for ``txn`` under its producer id and epoch. A transaction this id and epoch
    already committed answers NONE (a driver that repeats a commit is harmless); one aborted
    meanwhile (timed out, fenced) raises: its records are gone."""
    p = _producer(props, txn.transactional_id, timeout_ms)
    try:
        p.resume_transaction(txn.producer_id, txn.producer_epoch)
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    except KafkaException as exc:
        what = "commit" if commit else "abort"
        raise RuntimeError(
            f"{what} of transaction {txn.transactional_id!r} (producer id {txn.producer_id}, "
            f"epoch {txn.producer_epoch}, {txn.records} records of Spark partition "
            f"{txn.partition_id}) failed: {exc.args[0].str()}"
            + (" - it was aborted before the commit (transaction.timeout.ms shorter than the "
               "job?)" if commit and exc.args[0].fatal() else "")) from None
    finally:
        p.close()


def fence(props: Mapping[str, Any], transactional_id: str, timeout_ms: int) -> None:
    """InitProducerId on ``transactional_id``: its open transaction is aborted and whoever
    holds the id is fenced."""
    p = _producer(props, transactional_id, timeout_ms)
    try:
        p.init_transactions()
    finally:
        p.close()


def run_all(calls: Iterable[Any]) -> None:
    """Run the calls on a few threads; the first failure is raised after all ran."""
    calls = list(calls)
    if not calls:
        return
    with ThreadPoolExecutor(min(THREADS, len(calls))) as pool:
        futures = [pool.submit(call) for call in calls]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]


def transactional_ids(props: Mapping[str, Any], prefix: str,
                      wait_s: float = LIST_WAIT_S) -> dict[str, str] | None:
    """{transactional id: state} of every id starting with ``prefix`` known to any broker's
    coordinator (ListTransactions on each broker), or None when the cluster cannot list
    them (Kafka before 3.0, no Describe permission).

    A broker that cannot be reached or answers with a retriable error (a node just killed is
    still in the metadata until the controller fences it; a coordinator that moved is still
    loading its transactions) is asked again, with fresh metadata, for up to ``wait_s``:
    skipping it would leave the leftovers it coordinates open until transaction.timeout.ms,
    holding read_committed readers back. After that, what the other brokers listed."""
    from confluent_kafka.admin import AdminClient

    from ..blocking_client import RequestFailed
    from ..protocol import error_codes as ec
    from ..transactions_cli import TransactionsClient
    from .options import connection

    conf = connection(props)
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"):
        log.warning("cannot list transactions over %s: leftover transactions of failed "
                    "attempts end by transaction.timeout.ms", protocol)
        return None
    admin = AdminClient(conf)
    deadline = time.monotonic() + wait_s
    found: dict[str, str] = {}
    while True:
        unanswered: dict[int, str] = {}
        for broker in admin.list_topics(timeout=30).brokers.values():
            try:
                with TransactionsClient(f"{broker.host}:{broker.port}", conf) as client:
                    for t in client.list_transactions():
                        if t.transactional_id.startswith(prefix):
                            found[t.transactional_id] = t.transaction_state
            except OSError as exc:
                unanswered[broker.id] = str(exc)
            except RequestFailed as exc:
                if exc.code is None or not ec.is_retriable(exc.code):
                    return _cannot_list(broker.id, exc)
                unanswered[broker.id] = str(exc)
            except (ValueError, KeyError) as exc:  # no ListTransactions (Kafka before 3.0)
                return _cannot_list(broker.id, exc)
        if not unanswered:
            return found
        if time.monotonic() > deadline:
            log.warning("ListTransactions unanswered by brokers %s for %.0f s: leftover "
                        "transactions of failed attempts they coordinate end by "
                        "transaction.timeout.ms", unanswered, wait_s)
            return found
        time.sleep(LIST_RETRY_BACKOFF_S)


def _cannot_list(broker_id: int, exc: Exception) -> None:
    log.warning("ListTransactions on broker %s failed (%s): leftover transactions of failed "
                "attempts end by transaction.timeout.ms", broker_id, exc)
    return None


def settle(props: Mapping[str, Any], prefix: str, commit: Iterable[OpenTransaction],
           abort: Iterable[OpenTransaction], timeout_ms: int,
           keep: Iterable[str] = ()) -> None:
    """Commit ``commit``, abort ``abort``, then fence every other id under ``prefix`` that
    may still hold an open transaction (failed and zombie attempts), except ``keep``."""
    commit, abort = list(commit), list(abort)
    run_all(lambda t=t: end(props, t, True, timeout_ms) for t in commit)
    run_all(lambda t=t: end(props, t, False, timeout_ms) for t in abort)
    done = {t.transactional_id for t in commit + abort} | set(keep)
    known = transactional_ids(props, prefix)
    if known is None:
        return
    # Only open transactions: ended ids stay CompleteCommit / CompleteAbort, and a fenced id
    # is Empty from then on (fencing Empty ids too would fence every earlier leftover again at
    # each commit). A zombie that has not written yet is fenced by a later commit, or its
    # transaction ends at its timeout; it is never committed.
    left = [tid for tid, state in known.items() if tid not in done and state == "Ongoing"]
    if left:
        log.info("fencing %d transactional id(s) of failed attempts under %s", len(left),
                 prefix)
    run_all(lambda tid=tid: fence(props, tid, timeout_ms) for tid in left)
