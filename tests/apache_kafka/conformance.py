"""What the conformance tests share (issue 47): a 1-node Apache Kafka and ``kip broker``
side by side (``pair``), what makes their outputs comparable, and topics filled the same way
on both.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_cluster import KafkaCluster
from tool_runs import Target, differences, normalize, run_both

from kipproducer.broker.embedded import EmbeddedBroker

# The Kafka node's settings that show in what the tools print (BASE_CONFIG of
# kafka_cluster.py, and its 1-node min.insync.replicas), given to kip broker too.
SHARED_CONFIG = {
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

# Differences docs/broker.md lists as deliberate ("Kafka's own tools and Java clients"),
# taken out of both outputs:
DELIBERATE = (
    # kip broker lists every broker property that can supply a topic config's value among its
    # synonyms (log.retention.hours, log.roll.hours), with the built-in default it falls back
    # to (log.flush.interval.ms); Kafka only the first property, and only when it has a value.
    (r"(, )?DEFAULT_CONFIG:log\.(retention|roll|roll\.jitter)\.hours=\d+", ""),
    (r"DEFAULT_CONFIG:log\.flush\.interval\.ms=\d+", ""),
    (r"\{, ", "{"),
    # Kafka's controller keeps min.insync.replicas as a cluster-wide dynamic default
    # (set from the static config when the cluster is formatted).
    (r"^ *min\.insync\.replicas=1 sensitive=false "
     r"synonyms=\{DYNAMIC_DEFAULT_BROKER_CONFIG:min\.insync\.replicas=1\}$", ""),
    (r"DYNAMIC_DEFAULT_BROKER_CONFIG:min\.insync\.replicas=1, ", ""),
    # kip broker's topic configs are Kafka 3.9's (three that 4.0 removed) plus its own
    # check.expected.offsets and key.conditional.partitions.
    (r"^ *(message\.downconversion\.enable|message\.format\.version|"
     r"message\.timestamp\.difference\.max\.ms|check\.expected\.offsets|"
     r"key\.conditional\.partitions)=.*$", ""),
    # A stack trace's frames are the tool's, not the broker's.
    (r"^\s+at .*$", ""),
    (r"^\s+\.\.\. \d+ more$", ""),
)


class Pair:
    def __init__(self, kafka: KafkaCluster, kip: EmbeddedBroker, root: Path) -> None:
        self.kafka_cluster = kafka
        self.kip_broker = kip
        (root / "kafka").mkdir()
        (root / "kip").mkdir()
        self.kafka = Target("kafka", kafka.bootstrap, "1", root / "kafka")
        self.kip = Target("kip", kip.bootstrap_servers, str(kip.broker.node_id), root / "kip")

    def compare(self, commands: list[tuple[str, ...]], *extra: tuple[str, str],
                unordered: Collection[int] = ()) -> list[str]:
        """The differences; ``self.runs``: what kip broker printed, normalized, by command
        (for the checks that the commands did what they were meant to)."""
        on_kafka, on_kip = run_both(self.kafka, self.kip, commands)
        rules = (*DELIBERATE, *extra)
        self.runs = [normalize(run.text, *rules) for run in on_kip]
        if os.environ.get("KIP_SHOW_TOOLS"):
            for run, text in zip(on_kip, self.runs, strict=True):
                print(f"$ {' '.join(run.command)}\n{text}\n")
        return differences(on_kafka, on_kip, *rules, unordered=unordered)


def open_pair(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """The body of each conformance module's ``pair`` fixture: kip broker beside ``kafka1``."""
    with EmbeddedBroker(config=SHARED_CONFIG) as kip:
        yield Pair(kafka1, kip, tmp_path_factory.mktemp("conformance"))


def same(found: list[str]) -> None:
    assert not found, "Kafka's tools print differently on kip broker:\n\n" + "\n\n".join(found)


BASE_TS = int(time.time() * 1000) - 3_600_000  # an hour ago: within retention, same on both


def fill(bootstrap: str, topic: str, partitions: int = 2, per_partition: int = 5) -> None:
    """``topic`` with ``per_partition`` records in each partition, record i of partition p
    stamped BASE_TS + i seconds (p * 100 ms later), the same bytes on either broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d-%d" % (p, i), partition=p,
                             timestamp=BASE_TS + i * 1000 + p * 100)
            producer.flush(30)  # one batch per record: the same offsets and sizes on both
    assert producer.flush(30) == 0
