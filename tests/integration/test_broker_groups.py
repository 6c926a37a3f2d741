"""Consumer groups with librdkafka: rebalance between two members, commit, restart, resume.

The resume check is exact: a new member of the group, after the broker restarted on the same
data dir, starts every partition at the offset committed before the restart; together with
what was consumed and committed before, every record is seen exactly once.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from integration_support import KipBroker, create_topics, unique

PARTITIONS = 4
PER_PARTITION = 50
TIMEOUT = 20.0


def consumer(bootstrap: str, group: str, strategy: str = "range", **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy,
            # The broker's minimum: a member that dies is noticed within 6 s.
            "session.timeout.ms": 6000,
            # A member learns of a rebalance on its next heartbeat: keep that short.
            "heartbeat.interval.ms": 300,
            "check.crcs": True,
            **extra,
        }
    )


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """``count`` records per partition, values ``p<partition>-<n>`` for n in start..."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for n in range(start, start + count):
        for p in range(PARTITIONS):
            producer.produce(topic, b"p%d-%d" % (p, n), partition=p)
    assert producer.flush(TIMEOUT) == 0


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_all(consumers: list[Consumer], sink: list | None = None, timeout: float = 0.1) -> None:
    for c in consumers:
        msg = c.poll(timeout)
        if msg is None:
            continue
        assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
        if sink is not None and msg.error() is None:
            sink.append((c, msg))


def wait_for_split(consumers: list[Consumer], timeout: float = TIMEOUT) -> list[set[int]]:
    """Poll every member until each holds partitions and together exactly all, once."""
    deadline = time.monotonic() + timeout
    while True:
        poll_all(consumers)
        parts = [assigned(c) for c in consumers]
        total = sum(len(p) for p in parts)
        if all(parts) and set().union(*parts) == set(range(PARTITIONS)) and total == PARTITIONS:
            return parts
        if time.monotonic() > deadline:
            raise AssertionError(f"assignment never settled: {parts}")


@pytest.mark.parametrize(
    "strategy, restart",
    [
        ("range", "sigterm"),
        ("roundrobin", "sigterm"),
        ("cooperative-sticky", "sigterm"),
        # A crash right after the commits were acknowledged must not lose them either.
        ("range", "sigkill"),
    ],
)
def test_two_members_rebalance_commit_restart_resume(
    kip_broker, strategy: str, restart: str
) -> None:
    broker: KipBroker = kip_broker()
    topic, group = unique("groups"), unique("group")
    create_topics(broker.bootstrap, {topic: PARTITIONS})

    first = consumer(broker.bootstrap, group, strategy)
    second = consumer(broker.bootstrap, group, strategy)
    try:
        first.subscribe([topic])
        assert wait_for_split([first]) == [set(range(PARTITIONS))]
        second.subscribe([topic])
        split = wait_for_split([first, second])
        assert all(split), f"both members hold partitions: {split}"

        # Records arrive only now, so nothing was consumed under a stale assignment.
        produce(broker.bootstrap, topic, 0, PER_PARTITION)
        # Consume a different-length prefix of each partition and commit exactly there.
        target = {p: 10 + 7 * p for p in range(PARTITIONS)}
        seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        got: list = []
        deadline = time.monotonic() + TIMEOUT
        while any(len(seen[p]) < target[p] for p in seen):
            assert time.monotonic() < deadline, {p: len(v) for p, v in seen.items()}
            poll_all([first, second], got)
            for member, msg in got:
                p = msg.partition()
                assert p in assigned(member), "a record from a partition the member lacks"
                if msg.offset() < target[p]:
                    assert msg.offset() == len(seen[p]), "records in offset order"
                    seen[p].append(msg.value())
                    # Commit the next offset to read, synchronously, like a careful app.
                    member.commit(
                        offsets=[TopicPartition(topic, p, msg.offset() + 1)], asynchronous=False
                    )
            got.clear()

        for member, parts in ((first, split[0]), (second, split[1])):
            committed = member.committed([TopicPartition(topic, p) for p in parts], timeout=10)
            assert {tp.partition: tp.offset for tp in committed} == {p: target[p] for p in parts}
    finally:
        first.close()
        second.close()

    if restart == "sigkill":
        broker.kill()
        broker.start()
    else:
        broker.restart()  # same data dir; the port may change
    produce(broker.bootstrap, topic, PER_PARTITION, 5)  # more records after the restart

    # The offsets survived the restart, as the admin API reports them.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT
    ).values()
    listed = future.result(TIMEOUT)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == target

    resumed = consumer(broker.bootstrap, group, strategy)
    try:
        resumed.subscribe([topic])
        rest: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        want = {p: PER_PARTITION + 5 - target[p] for p in range(PARTITIONS)}
        deadline = time.monotonic() + TIMEOUT
        while any(len(rest[p]) < want[p] for p in rest):
            assert time.monotonic() < deadline, {p: len(v) for p, v in rest.items()}
            msg = resumed.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            rest[msg.partition()].append((msg.offset(), msg.value()))
        # Nothing more to come: a duplicate would show up as an extra record here.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = resumed.poll(0.1)
            assert msg is None or msg.error() is not None, "an extra record after the end"
    finally:
        resumed.close()

    for p in range(PARTITIONS):
        offsets = [o for o, _ in rest[p]]
        assert offsets[0] == target[p], f"partition {p} resumed at the committed offset"
        assert offsets == list(range(target[p], PER_PARTITION + 5))
        values = seen[p] + [v for _, v in rest[p]]
        assert values == [b"p%d-%d" % (p, n) for n in range(PER_PARTITION + 5)]


def test_leaving_member_hands_its_partitions_back(kip_broker) -> None:
    broker: KipBroker = kip_broker()
    topic, group = unique("leave"), unique("group")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    first = consumer(broker.bootstrap, group)
    second = consumer(broker.bootstrap, group)
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        wait_for_split([first, second])
        second.close()  # LeaveGroup: the coordinator rebalances at once, no session timeout
        started = time.monotonic()
        assert wait_for_split([first], timeout=TIMEOUT) == [set(range(PARTITIONS))]
        # Well under the 6 s session timeout: the leave itself triggered the rebalance.
        assert time.monotonic() - started < 5.0

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        [future] = admin.describe_consumer_groups([group], request_timeout=TIMEOUT).values()
        described = future.result(TIMEOUT)
        assert len(described.members) == 1
        assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == set(
            range(PARTITIONS)
        )
    finally:
        first.close()


def test_cooperative_second_member_joins_then_leaves_rebalance_count(kip_broker) -> None:
    """The first member's callbacks when a second cooperative-sticky member joins, then closes.

    What Kafka's classic coordinator makes librdkafka do on the first member (A), with
    ``group.initial.rebalance.delay.ms=0``:

    1. generation 1, A alone: assign(all 4 partitions);
    2. B joins: A rejoins on REBALANCE_IN_PROGRESS, generation 2: A, the leader, keeps 2
       partitions and gives B none yet (cooperative: a partition is revoked before it moves):
       revoke(2), then assign(nothing new);
    3. A, having revoked, rejoins; a leader's rejoin rebalances a Stable group, B follows on its
       heartbeat, generation 3: B gets the 2 revoked partitions, A assign(nothing new);
    4. B closes: it revokes its partitions and sends LeaveGroup; the group rebalances at once,
       generation 4: A assign(the 2 partitions back).

    So 4 assign and 1 revoke callbacks on A, and no more while the group stays stable.
    """
    broker: KipBroker = kip_broker({"group.initial.rebalance.delay.ms": 0})
    topic, group = unique("coop"), unique("group")
    create_topics(broker.bootstrap, {topic: PARTITIONS})
    events: list[tuple[str, int]] = []
    first = consumer(broker.bootstrap, group, "cooperative-sticky")
    second = consumer(broker.bootstrap, group, "cooperative-sticky")
    try:
        first.subscribe(
            [topic],
            on_assign=lambda c, parts: events.append(("assign", len(parts))),
            on_revoke=lambda c, parts: events.append(("revoke", len(parts))),
        )
        wait_for_split([first])
        second.subscribe([topic])
        assert sorted(len(p) for p in wait_for_split([first, second])) == [2, 2]
        second.close()
        assert wait_for_split([first]) == [set(range(PARTITIONS))]
        quiet_until = time.monotonic() + 3.0  # ten heartbeats: room for a stray rebalance
        while time.monotonic() < quiet_until:
            poll_all([first])
        assert events == [("assign", 4), ("revoke", 2), ("assign", 0), ("assign", 0),
                          ("assign", 2)]
    finally:
        first.close()
