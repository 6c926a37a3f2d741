"""Producer groups (both modes) through an outage of their group coordinator: a member writes
rounds of records and commits its positions while broker 2 (the group's coordinator, and the
transaction coordinator in transactional mode; it leads no partition) is down for 2 s.

The baseline, in the same test and on the same event, is what a confluent-kafka user writes
for the same job: a Producer plus a Consumer that is a member of a group (subscribed to a
topic of as many partitions as there are source partitions) committing one offset per
partition each round with ``commit()`` after ``flush()`` (at-least-once); in transactional
mode the transaction through the same outage (its coordinator is the same broker), without
``send_offsets_to_transaction()``, which librdkafka blocked in past its timeout here (below).

What the mock does not model, and is therefore not asserted:

* CreateTopics: the positions topic is created in the mock beforehand.
* TxnOffsetCommit: acknowledged but not kept, so transactional positions are not read back;
  the at-least-once mode's are, by a new member of the group.
* A plain idempotent producer's retries are not deduplicated by the mock: at-least-once
  duplicates are not asserted; the transactional mode's must be 0.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from mock_cluster import MockCluster
from scenario_support import KEYS, PARTITIONS, Outcome, assert_within, judge, unique, value

from kipproducer import producer as kp

ROUNDS = 8
PER_ROUND = 1_000
SOURCE_PARTITIONS = 4
EVENT_ROUND = 2
COORDINATOR = 2
OUTAGE_S = 2.0
# Brokers 1 and 3 lead every partition: the outage is the coordinator's only.
LEADERS = [1, 3]
# The baseline's transactional calls: a timed-out one is retried, as a user does.
CALL_TIMEOUT_S = 10
# Not flagged retriable by librdkafka, but only "ask again once the coordinator is back".
_COORDINATOR_AWAY = (KafkaError._WAIT_COORD, KafkaError.COORDINATOR_NOT_AVAILABLE,
                     KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT)


def _outage(cluster: MockCluster) -> threading.Timer:
    cluster.broker_down(COORDINATOR)
    timer = threading.Timer(OUTAGE_S, cluster.broker_up, (COORDINATOR,))
    timer.start()
    return timer


class _ConfluentMember:
    """The baseline: a confluent Producer and a Consumer member of ``group`` whose committed
    offsets play the part of the positions."""

    def __init__(self, conf: dict, group: str, cluster: MockCluster) -> None:
        self.topic = unique("cg-offsets")
        cluster.create_topic(self.topic, SOURCE_PARTITIONS,
                             [LEADERS[p % 2] for p in range(SOURCE_PARTITIONS)])
        self.producer = Producer(conf)
        self.transactional = "transactional.id" in conf
        self.retries = 0
        if self.transactional:
            self.producer.init_transactions(30)
        self.consumer = Consumer({"bootstrap.servers": conf["bootstrap.servers"],
                                  "reconnect.backoff.max.ms": conf["reconnect.backoff.max.ms"],
                                  "group.id": group, "session.timeout.ms": 6000,
                                  "enable.auto.commit": False})
        assigned: list = []
        self.consumer.subscribe([self.topic],
                                on_assign=lambda c, parts: assigned.extend(parts))
        deadline = time.monotonic() + 30
        while len(assigned) < SOURCE_PARTITIONS:
            assert time.monotonic() < deadline, "the confluent member got no assignment"
            self.consumer.poll(0.1)

    def commit(self, r: int) -> None:
        offsets = [TopicPartition(self.topic, p, r + 1) for p in range(SOURCE_PARTITIONS)]
        if self.transactional:
            # No send_offsets_to_transaction: through this outage librdkafka's call blocked
            # over 100 s in the mock whatever its timeout (seen with confluent-kafka 2.16.1),
            # so the baseline is the transaction through the same coordinator outage.
            self._retried(lambda: self.producer.commit_transaction(CALL_TIMEOUT_S))
            return
        assert self.producer.flush(60) == 0
        self._retried(lambda: self.consumer.commit(offsets=offsets, asynchronous=False))

    def _retried(self, call) -> None:
        """What a user does: a retriable error (a timeout, the coordinator not available) is
        tried again, the member kept alive between tries."""
        deadline = time.monotonic() + 60
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                self.retries += 1
                error = exc.args[0]
                if not (error.retriable() or error.code() in _COORDINATOR_AWAY) or (
                        time.monotonic() > deadline):
                    raise
                self.consumer.poll(0.1)

    def close(self) -> None:
        self.producer.flush(10)
        self.consumer.close()


def _rounds(cluster: MockCluster, client: str, mode: str) -> tuple[Outcome, dict | None]:
    topic = unique(f"gc-{mode}-{client}")
    cluster.create_topic(topic, PARTITIONS, [LEADERS[p % 2] for p in range(PARTITIONS)])
    group = unique("gc")
    cluster.set_coordinator("group", group, COORDINATOR)
    # reconnect.backoff.max.ms bounds librdkafka's doubling reconnect backoff (10 s by
    # default) on both sides: how soon either client's next attempt after the coordinator is
    # back comes otherwise varies by seconds from run to run, and the comparison measured that
    conf = {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
            "acks": "all", "linger.ms": 5, "reconnect.backoff.max.ms": 500}
    if mode == "transactional":
        conf["transactional.id"] = unique("gc-txn")
        cluster.set_coordinator("transaction", conf["transactional.id"], COORDINATOR)
    member: _ConfluentMember | None = None
    if client == "kip":
        cluster.create_topic(f"__kip_positions_{group}", SOURCE_PARTITIONS,
                             [LEADERS[p % 2] for p in range(SOURCE_PARTITIONS)])
        conf.update({"group.id": group, "source.partition.count": SOURCE_PARTITIONS,
                     "session.timeout.ms": 6000})
        producer = kp.Producer(conf)
        assert producer.subscribe(timeout=30) == {p: None for p in range(SOURCE_PARTITIONS)}
    else:
        member = _ConfluentMember(conf, group, cluster)
        producer = member.producer
    outcome = Outcome(client, topic)
    errors = outcome.errors

    def report(err, _) -> None:
        if err is not None:
            errors.append(err)

    timer = None
    started = time.monotonic()
    try:
        for r in range(ROUNDS):
            seqs = range(r * PER_ROUND, (r + 1) * PER_ROUND)
            values = [value(i) for i in seqs]
            keys = [b"k%02d" % (i % KEYS) for i in seqs]
            if mode == "transactional":
                producer.begin_transaction()
            if client == "kip":
                producer.produce_arrays(topic, np.array(values, dtype=object),
                                        keys=np.array(keys, dtype=object), on_delivery=report)
            else:
                for v, k in zip(values, keys, strict=True):
                    producer.produce(topic, v, key=k, on_delivery=report)
            if r == EVENT_ROUND:  # the coordinator goes while the round is written
                timer = _outage(cluster)
            positions = {p: f"round-{r}" for p in range(SOURCE_PARTITIONS)}
            if client != "kip":
                member.commit(r)
            elif mode == "transactional":
                producer.commit_transaction(60, positions=positions)
            else:
                assert producer.flush(60) == 0
                producer.commit_positions(positions)
        outcome.elapsed = time.monotonic() - started
        outcome.delivered = ROUNDS * PER_ROUND - len(errors)
    finally:
        if timer is not None:
            timer.join()
        cluster.broker_up(COORDINATOR)
        if member is not None:
            member.close()
        else:
            producer.close()
    resumed = None
    if client == "kip" and mode == "at-least-once":
        again = kp.Producer(conf)  # a new member resumes at the last committed positions
        try:
            resumed = again.subscribe(timeout=30)
        finally:
            again.close()
    return judge(outcome, cluster.bootstrap, ROUNDS * PER_ROUND), resumed


@pytest.mark.parametrize("mode", ["at-least-once", "transactional"])
def test_producer_group_through_coordinator_outage(mock_cluster: MockCluster, mode: str):
    mock_cluster.set_controller(1)
    confluent, _ = _rounds(mock_cluster, "confluent", mode)
    kip, resumed = _rounds(mock_cluster, "kip", mode)
    for outcome in (confluent, kip):
        print(outcome)
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert (outcome.lost, outcome.reordered) == (0, 0), outcome
        if mode == "transactional":
            assert outcome.duplicated == 0, outcome
    if mode == "at-least-once":
        assert resumed == {p: f"round-{ROUNDS - 1}" for p in range(SOURCE_PARTITIONS)}
    assert_within(kip, confluent)
