"""The harness itself: the mock cluster's commands do what the scenario tests rely on."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from mock_cluster import PRODUCE, MockCluster


def _leaders(producer: Producer, topic: str) -> dict[int, int]:
    md = producer.list_topics(topic, timeout=5)
    return {p: meta.leader for p, meta in md.topics[topic].partitions.items()}


def test_topics_leaders_errors_and_brokers_down(mock_cluster: MockCluster):
    assert len(mock_cluster.bootstrap.split(",")) == 3
    mock_cluster.create_topic("t", 6)
    p = Producer({"bootstrap.servers": mock_cluster.bootstrap, "enable.idempotence": True,
                  "topic.metadata.refresh.interval.ms": 200})
    assert _leaders(p, "t") == {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}
    mock_cluster.set_leader("t", 0, 3)
    assert _leaders(p, "t")[0] == 3

    # Injected Produce errors are retried by librdkafka: everything lands once.
    mock_cluster.push_request_errors(PRODUCE, [KafkaError.NOT_LEADER_FOR_PARTITION] * 2)
    mock_cluster.push_broker_errors(2, PRODUCE, [(KafkaError.REQUEST_TIMED_OUT, 10)])
    for i in range(600):
        p.produce("t", b"%d" % i, partition=i % 6)
    assert p.flush(20) == 0

    # A broker down refuses connections; its partitions moved elsewhere still take records.
    mock_cluster.broker_down(1)
    mock_cluster.set_leader("t", 3, 2)
    started = time.monotonic()
    for _ in range(60):
        p.produce("t", b"x", partition=3)
    assert p.flush(20) == 0
    assert time.monotonic() - started < 15
    mock_cluster.broker_up(1)
    mock_cluster.set_coordinator("transaction", "some-txn", 2)

    c = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "g",
                  "enable.partition.eof": True})
    c.assign([TopicPartition("t", i, 0) for i in range(6)])
    counts: dict[int, int] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + 20
    while len(eof) < 6 and time.monotonic() < deadline:
        for m in c.consume(1000, 0.1):
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF
                eof.add(m.partition())
                continue
            counts[m.partition()] = counts.get(m.partition(), 0) + 1
    c.close()
    assert counts == {0: 100, 1: 100, 2: 100, 3: 160, 4: 100, 5: 100}


def test_subprocess_stops_cleanly_and_reports_command_errors(tmp_path):
    cluster = MockCluster(3, log_path=tmp_path / "mock.log")
    pid = cluster.proc.pid
    try:
        cluster.create_topic("t", 1)
        try:
            cluster.set_leader("t", 0, 99)
        except RuntimeError as exc:
            assert "librdkafka error" in str(exc)
        else:
            raise AssertionError("setting a leader on an unknown broker did not fail")
    finally:
        assert cluster.close() == 0
    assert cluster.proc.pid == pid and cluster.proc.poll() == 0
