"""The Spark sink's exactly-once write and the kip source with ``kip broker`` killed -9 mid-job
and restarted (same port, same data dir): tests/spark/sink_kill_scenario.py's jobs and checks,
the ones a 3-node Apache Kafka runs with a node killed (tests/apache_kafka/test_kafka_spark.py).
Here the victim is the only broker: partition leader and transaction coordinator of
everything, so the tasks and the driver wait for it to come back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from mirror_support import read, unique
from sink_kill_scenario import Log, Target, sink_and_source_through_kills

# the restartable `kip broker` subprocess of the Producer tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "producer"))
from producer_support import KipProcess  # noqa: E402

PARTITIONS = 6


@pytest.fixture
def kip(tmp_path: Path) -> Iterator[KipProcess]:
    broker = KipProcess(tmp_path / "kip-data", 0, config={
        "num.partitions": PARTITIONS,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}).start()
    try:
        yield broker
    finally:
        broker.kill()


def target(broker: KipProcess) -> Target:
    def kill(topic: str, open_ids: list[str]) -> str:
        broker.kill()
        return "kip broker (every partition's leader, every transaction's coordinator)"

    def records(topic: str, isolation: str) -> Log:
        return {p: [(r.offset, r.key, r.value) for r in rs]
                for p, rs in read(broker.bootstrap, topic, PARTITIONS, isolation).items()}

    def count_all(topic: str) -> int:
        return sum(len(rs) for rs in records(topic, "read_uncommitted").values())

    def restart() -> None:
        broker.start()

    return Target(broker.bootstrap, kill, restart, lambda topic: records(topic, "read_committed"),
                  count_all)


@pytest.mark.slow
def test_spark_sink_and_source_through_the_broker_killed(spark, kip: KipProcess,
                                                         tmp_path: Path) -> None:
    topic = unique("spark-eos-kill")
    admin = AdminClient({"bootstrap.servers": kip.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    sink_and_source_through_kills(spark, target(kip), topic, PARTITIONS, tmp_path)
