"""Reading a topic back from Apache Kafka twice, by librdkafka and by Kafka's own Java consumer
(``kafka-console-consumer``), at either isolation level, so every check of what a topic holds
is made by both and both must agree; and :class:`WireLog`, the requests the engine sent."""

from __future__ import annotations

import pytest
from kafka_cluster import KafkaCluster
from kafka_jars import reader_classpath
from scenario_support import Log, Outcome, count_faults, read_records, sequences


def rdkafka_read(bootstrap: str, topic: str, partitions: int, *,
                 isolation: str = "read_committed", timeout: float = 60.0,
                 config: dict | None = None) -> Log:
    return read_records(bootstrap, topic, partitions, timeout=timeout,
                        config={"isolation.level": isolation, **(config or {})})


def java_read_topics(cluster: KafkaCluster, topics: list[str], *,
                     isolation: str = "read_committed",
                     bootstrap: str | None = None) -> dict[str, Log]:
    """Kafka's own Java consumer (java/ReadTopics.java) reads every partition of ``topics``
    from the beginning up to its end offset at that isolation level."""
    out = cluster.tool("ReadTopics", bootstrap or cluster.bootstrap, isolation, *topics,
                       timeout=300, classpath=reader_classpath())
    logs: dict[str, Log] = {t: {} for t in topics}
    for line in out.splitlines():
        topic, part, off, key, value = line.split("\t")
        logs[topic].setdefault(int(part), []).append(
            (int(off), None if key == "-" else bytes.fromhex(key),
             None if value == "-" else bytes.fromhex(value)))
    return logs


def java_read(cluster: KafkaCluster, topic: str, partitions: int, *,
              isolation: str = "read_committed", bootstrap: str | None = None) -> Log:
    log = java_read_topics(cluster, [topic], isolation=isolation, bootstrap=bootstrap)[topic]
    return {p: log.get(p, []) for p in range(partitions)}


def read_both(cluster: KafkaCluster, topic: str, partitions: int, *,
              isolation: str = "read_committed") -> Log:
    """What librdkafka reads, after checking that Kafka's Java consumer reads the same
    offsets, keys and values."""
    return read_both_topics(cluster, [topic], partitions, isolation=isolation)[topic]


def read_both_topics(cluster: KafkaCluster, topics: list[str], partitions: int, *,
                     isolation: str = "read_committed") -> dict[str, Log]:
    """read_both for several topics, one Java consumer for all of them."""
    java = java_read_topics(cluster, topics, isolation=isolation)
    logs = {}
    for topic in topics:
        logs[topic] = _agree(topic, partitions, isolation, rdkafka_read(
            cluster.bootstrap, topic, partitions, isolation=isolation), java[topic])
    return logs


def _agree(topic: str, partitions: int, isolation: str, ours: Log, java: Log) -> Log:
    theirs = {p: java.get(p, []) for p in range(partitions)}
    for p in range(partitions):
        if ours[p] != theirs[p]:
            a, b = ours[p], theirs[p]
            pairs = enumerate(zip(a, b, strict=False))
            first = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
            raise AssertionError(
                f"{topic}[{p}] ({isolation}): librdkafka read {len(a)} records, Kafka's Java "
                f"consumer {len(b)}; first difference at #{first}: "
                f"{a[first:first + 2]} vs {b[first:first + 2]}")
    return ours


def judge_outcomes(cluster: KafkaCluster, outcomes: list[Outcome], partitions: int, n: int,
                   label: str) -> None:
    """Every load's topic read back by both readers (one Java consumer for all): every
    record reported delivered, none lost, duplicated or reordered."""
    logs = read_both_topics(cluster, [o.topic for o in outcomes], partitions)
    for outcome in outcomes:
        count_faults(outcome, sequences(logs[outcome.topic]), n)
        print(f"{label}: {outcome.client} {outcome.elapsed:.2f} s, delivered "
              f"{outcome.delivered}, lost {outcome.lost}, duplicated {outcome.duplicated}, "
              f"reordered {outcome.reordered}, errors {len(outcome.errors)}")
    for outcome in outcomes:
        assert not outcome.errors, (outcome.client, outcome.errors[:3])
        assert outcome.delivered == n, outcome
        assert (outcome.lost, outcome.duplicated, outcome.reordered) == (0, 0, 0), outcome


class WireLog:
    """The (api key, version) of every request the engines of this process send, in order
    (a spy on BrokerConnection, installed with pytest's monkeypatch): what shows which
    transaction flow went over the wire to the real broker."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from kipproducer.engine.connection import BrokerConnection

        self.sent: list[tuple[int, int]] = []
        request, send = BrokerConnection.request, BrokerConnection.send

        async def logged_request(conn, api_key, version, body, **kw):
            self.sent.append((api_key, version))
            return await request(conn, api_key, version, body, **kw)

        def logged_send(conn, api_key, version, body, on_answer, **kw):
            self.sent.append((api_key, version))
            return send(conn, api_key, version, body, on_answer, **kw)

        monkeypatch.setattr(BrokerConnection, "request", logged_request)
        monkeypatch.setattr(BrokerConnection, "send", logged_send)

    def versions(self, api_key: int) -> set[int]:
        return {v for k, v in self.sent if k == api_key}

    def count(self, api_key: int) -> int:
        return sum(1 for k, _ in self.sent if k == api_key)

    def transactions_with(self, api_key: int) -> int:
        """How many stretches between two EndTxn requests hold ``api_key``: the
        transactions that sent it (a retried EndTxn makes an empty stretch)."""
        from kipproducer.protocol.api_keys import END_TXN

        found, seen = 0, False
        for key, _ in self.sent:
            if key == api_key:
                seen = True
            elif key == END_TXN:
                found += seen
                seen = False
        return found
