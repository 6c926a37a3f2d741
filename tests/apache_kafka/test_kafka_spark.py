"""The Spark sink's exactly-once write (``df.write.format("kip")``, two-phase commit across
Spark's tasks and driver) and the kip source on a 3-node Apache Kafka, each job through a
node killed -9 mid-job and restarted: tests/spark/sink_kill_scenario.py's jobs and checks
(the reference broker runs the same ones, tests/spark/test_spark_broker_kill.py).

The sink's victim is the node coordinating one of the write's open transactions (found by
ListTransactions, then the id's __transaction_state partition leader), which leads
partitions of the topic too: the tasks' produces, their AddPartitionsToTxn and the driver's
EndTxn all meet the failover. The source's victim leads partition 0. What the topic holds is
read by librdkafka and by Kafka's Java consumer, which must agree.

The SparkSession is this module's own (local[2,4], tests/spark/spark_session.py): the Spark
tests run on another xdist worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from kafka_cluster import KafkaCluster  # noqa: E402
from kafka_support import rdkafka_read, read_both  # noqa: E402
from mirror_support import stable, unique  # noqa: E402
from sink_kill_scenario import Target, sink_and_source_through_kills  # noqa: E402
from spark_session import session_fixture  # noqa: E402

from kipproducer import Producer  # noqa: E402
from kipproducer.spark.twophase import settle, transactional_ids  # noqa: E402

PARTITIONS = 6


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from session_fixture("kipproducer-apache-kafka")


def target(cluster: KafkaCluster) -> Target:
    victims: list[int] = []

    def kill(topic: str, open_ids: list[str]) -> str:
        leaders = cluster.leaders(topic)
        if open_ids:
            victim = cluster.transaction_coordinator(open_ids[0])
            what = f"node {victim} (coordinator of {open_ids[0]}"
        else:
            victim = leaders[0]
            what = f"node {victim} ({topic}/0's leader"
        led = sorted(p for p, node in leaders.items() if node == victim)
        assert led, (victim, leaders)
        cluster.kill(victim)
        victims.append(victim)
        return f"{what}, leading partitions {led})"

    def restart() -> None:
        cluster.restart(victims[-1], wait_in_sync=False)

    def read_committed(topic: str):  # type: ignore[no-untyped-def]
        cluster.wait_in_sync(topics=[topic])  # Kafka's Java consumer reads from leaders
        return read_both(cluster, topic, PARTITIONS)

    def count_all(topic: str) -> int:
        log = rdkafka_read(cluster.bootstrap, topic, PARTITIONS, isolation="read_uncommitted")
        return sum(len(records) for records in log.values())

    return Target(cluster.bootstrap, kill, restart, read_committed, count_all)


@pytest.mark.timeout(480)
def test_spark_sink_and_source_through_a_node_killed(kafka3: KafkaCluster, spark,
                                                     tmp_path: Path) -> None:
    topic = kafka3.unique_topic("spark-eos", PARTITIONS)
    sink_and_source_through_kills(spark, target(kafka3), topic, PARTITIONS, tmp_path)
    kafka3.wait_in_sync()  # the next test starts on a whole cluster


def test_driver_fences_a_leftover_while_a_node_is_down(kafka3: KafkaCluster) -> None:
    """The driver's commit fences the transactions failed attempts left open, found by
    ListTransactions on every broker. A node killed -9 a moment before stays in the metadata
    until the controller fences it: the driver asks it again until it is gone, rather than
    skipping the fencing (which left the leftover open, holding read_committed readers back,
    until its transaction.timeout.ms)."""
    topic = kafka3.unique_topic("spark-leftover", 1)
    prefix = unique("kip-spark-leftover")
    tid = f"{prefix}-0-7"
    props = {"bootstrap.servers": kafka3.bootstrap}
    zombie = Producer({**props, "transactional.id": tid, "transaction.timeout.ms": 300_000})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, b"a failed attempt's row", partition=0)
    assert zombie.flush(60) == 0
    keep = {kafka3.transaction_coordinator(tid), kafka3.leader(topic, 0)}
    victim = next(node for node in kafka3.nodes if node not in keep)
    kafka3.kill(victim)
    try:
        settle(props, prefix + "-", commit=[], abort=[], timeout_ms=300_000)
        states = transactional_ids(props, prefix)
        assert states is not None and states.get(tid) != "Ongoing", states
        stable(kafka3.bootstrap, topic, 1, timeout=20)
        assert rdkafka_read(kafka3.bootstrap, topic, 1) == {0: []}
    finally:
        zombie.close()
        kafka3.restart(victim)
