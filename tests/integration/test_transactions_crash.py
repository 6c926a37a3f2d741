"""kill -9 of `kip broker` in the middle of 100 transaction rounds.

A transactional producer (librdkafka's, and kipproducer.Producer whose own engine runs the
transactions: the same confluent-kafka API) runs 100 rounds on a 2-partition topic, flushing after
every record; every fourth round is aborted, the others committed. The broker is killed with
SIGKILL twice (once between a round's records, once after a round's records were flushed but
before its commit) and restarted on the same port and data dir each time. The producer goes on
through the restarts as a real application would: a retriable error is retried, an abortable
one aborts the round (and the round counts as aborted).

Afterwards:
- a read_committed consumer sees exactly the records of the rounds whose commit returned, in
  order per partition: no committed record lost, no aborted record visible;
- a read_uncommitted consumer sees those records too (and the aborted ones the log kept);
- a second producer's transaction left open across a kill is aborted by the restarted broker
  when its transaction.timeout.ms runs out: the last stable offset catches up with the high
  watermark and the producer that owned it is fenced.
"""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from integration_support import create_topics, unique, wait_until
from txn_clients import END_OFFSETS, READERS

import kipproducer

PARTITIONS = 2
ROUNDS = 100
RECORDS_PER_ROUND = 3
KILL_BETWEEN_RECORDS = 30  # killed after the first record of this round
KILL_BEFORE_COMMIT = 65  # killed after this round's records, before its commit

BROKER_CONFIG = {
    "num.partitions": PARTITIONS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
}


PRODUCERS = {"confluent": confluent_kafka.Producer, "kipproducer": kipproducer.Producer}


def producer(kind: str, bootstrap: str, transactional_id: str, **extra):
    return PRODUCERS[kind]({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 0,
        "reconnect.backoff.max.ms": 200,
        "message.timeout.ms": 60_000,
        **extra,
    })


def until_done(call, what: str, timeout: float = 45.0):
    """Retry a transactional call while librdkafka says it may be retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if not err.retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", list(PRODUCERS))
def test_kill_9_during_transaction_rounds(kip_broker, kind: str) -> None:
    broker = kip_broker(config=BROKER_CONFIG, allow_tracebacks=False)
    topic = unique("txn-crash")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    p = producer(kind, broker.bootstrap, unique("crash"))
    until_done(lambda: p.init_transactions(30), "init_transactions")

    committed: dict[int, list[bytes]] = {part: [] for part in range(PARTITIONS)}
    outcomes = {"commit": 0, "abort": 0, "abort-after-error": 0}
    for rnd in range(ROUNDS):
        p.begin_transaction()
        sent: dict[int, list[bytes]] = {part: [] for part in range(PARTITIONS)}
        failed = False
        for i in range(RECORDS_PER_ROUND):
            part = (rnd + i) % PARTITIONS
            value = f"r{rnd}-{i}".encode()
            errors: list[KafkaError] = []
            p.produce(topic, value, partition=part,
                      on_delivery=lambda err, msg, errors=errors: err and errors.append(err))
            remaining = p.flush(60)
            assert remaining == 0, f"round {rnd}: a record was never delivered"
            if errors:
                failed = True
            sent[part].append(value)
            if rnd == KILL_BETWEEN_RECORDS and i == 0:
                broker.kill()
                broker.restart(same_port=True)
        if rnd == KILL_BEFORE_COMMIT:
            broker.kill()
            broker.restart(same_port=True)
        if rnd % 4 == 3 or failed:
            until_done(lambda: p.abort_transaction(30), "abort")
            outcomes["abort" if not failed else "abort-after-error"] += 1
            continue
        try:
            until_done(lambda: p.commit_transaction(30), "commit")
        except KafkaException as exc:
            assert exc.args[0].txn_requires_abort(), exc  # never fatal: nothing fenced us
            until_done(lambda: p.abort_transaction(30), "abort")
            outcomes["abort-after-error"] += 1
            continue
        outcomes["commit"] += 1
        for part, values in sent.items():
            committed[part].extend(values)
    assert outcomes["commit"] >= 70, outcomes  # the kills cost at most a round or two

    total = sum(len(v) for v in committed.values())
    seen = READERS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_committed", total)
    assert {part: [value for _, value in rows] for part, rows in seen.items()} == committed
    uncommitted = READERS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_uncommitted",
                                       total)
    for part in range(PARTITIONS):
        assert set(committed[part]) <= {value for _, value in uncommitted[part]}

    # A transaction left open across a kill: the restarted broker aborts it on its timeout.
    q = producer(kind, broker.bootstrap, unique("stale"),
                 **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000})
    until_done(lambda: q.init_transactions(30), "init_transactions")
    q.begin_transaction()
    q.produce(topic, b"left-open", partition=0)
    assert q.flush(30) == 0
    ends = END_OFFSETS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_committed")
    highs = END_OFFSETS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_uncommitted")
    assert ends[0] < highs[0]  # the open transaction holds the last stable offset back
    broker.kill()
    broker.restart(same_port=True)
    wait_until(
        lambda: END_OFFSETS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_committed")
        == END_OFFSETS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_uncommitted"),
        timeout=30, what="the timed-out transaction to be aborted")
    seen = READERS["confluent"](broker.bootstrap, topic, PARTITIONS, "read_committed", total)
    assert b"left-open" not in {value for rows in seen.values() for _, value in rows}
    with pytest.raises(KafkaException) as fenced:
        until_done(lambda: q.commit_transaction(30), "commit of the timed-out transaction")
    assert fenced.value.args[0].fatal() or fenced.value.args[0].txn_requires_abort()
