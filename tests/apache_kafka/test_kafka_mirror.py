"""``kip mirror`` from Apache Kafka to Apache Kafka, in both modes, with the source
partition's leader killed -9 mid-copy: preserve mode keeps every offset (emulated KIP-391 on
the stock target), transactional mode copies exactly once (KIP-656, the source offsets
committed in the target's transactions).

Source and target are topics of the one 3-node ``kafka3`` cluster (the copy renamed
``copy.<topic>``), so the node killed is a node of both. The source is written by
confluent-kafka's Producer, paced over 3 s, while the mirror runs; 1 s in, the leader of the
source's partition 0 is killed -9, and it is back once the source is written. Judged: once
the mirror has caught up, the target holds exactly the source's records, read by librdkafka
and Kafka's Java consumer at read_committed (both must agree): preserve mode at the same
offsets, transactional mode in the same order per partition. There is no confluent-kafka
mirror to time against; the mirror must catch up within 60 s of the source's last record.
"""

from __future__ import annotations

import threading
import time
import traceback

import pytest
from confluent_kafka import Producer
from kafka_cluster import KafkaCluster
from kafka_support import read_both
from scenario_support import PARTITIONS, unique, value

from kipproducer.mirror import Mirror

N = 6_000
PACE_S = 3.0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["preserve", "transactional"])
def test_mirror_through_a_source_leader_killed(kafka3: KafkaCluster, mode: str) -> None:
    topic = kafka3.unique_topic(f"mirror-{mode}", PARTITIONS)
    renamed = f"copy.{topic}"
    mirror = Mirror(kafka3.bootstrap, kafka3.bootstrap, topic, mode=mode,
                    group=unique("mirror") if mode == "transactional" else None,
                    rename="copy.{topic}", progress=False, commit_interval_ms=200,
                    metadata_interval_ms=500, timeout=30)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            mirror.run()
        except BaseException as exc:  # handed to the test
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    producer = Producer({"bootstrap.servers": kafka3.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True, "acks": "all"})
    for i in range(100):  # the topic has records before the mirror starts
        producer.produce(topic, value(i), key=b"k%02d" % (i % 60))
    assert producer.flush(30) == 0
    thread.start()
    victim = kafka3.leader(topic, 0)
    killed = False
    started = time.monotonic()
    try:
        for i in range(100, N):
            if not killed and time.monotonic() - started > 1.0:
                kafka3.kill(victim)
                killed = True
            producer.produce(topic, value(i), key=b"k%02d" % (i % 60))
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(max(started + PACE_S * i / N - time.monotonic(), 0))
        assert producer.flush(120) == 0
        kafka3.restart(victim)
        source = read_both(kafka3, topic, PARTITIONS, isolation="read_committed")
        want = sum(len(v) for v in source.values())
        assert want == N
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not failure:
            try:
                copied = read_both(kafka3, renamed, PARTITIONS)
            except Exception:  # not created yet, or a reader still on its way
                time.sleep(0.5)
                continue
            if sum(len(v) for v in copied.values()) >= want:
                break
            time.sleep(0.5)
    finally:
        mirror.stop()
        thread.join(60)
    assert not failure, "the mirror stopped:\n" + "".join(
        traceback.format_exception(failure[0]))
    assert not thread.is_alive()
    copied = read_both(kafka3, renamed, PARTITIONS, isolation="read_committed")
    if mode == "preserve":
        assert copied == source
    else:
        assert {p: [r[1:] for r in rows] for p, rows in copied.items()} == \
            {p: [r[1:] for r in rows] for p, rows in source.items()}
