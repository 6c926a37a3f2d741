"""The mirror's Fetch reader on a multi-broker source whose leader broker goes down and stays
the leader (librdkafka's mock keeps a down broker's leaderships, and leaves the broker out of
Metadata's broker list, as a real cluster does for a broker that is gone): the reader goes on
reading the other brokers' partitions, asks for the leaderless partition's metadata with a
backoff (100 ms doubling to 1 s), not every round, stops dialling the dead broker, and reads
its partition again once the broker is back."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Producer
from mock_cluster import MockCluster
from scenario_support import unique

from kipproducer.engine import cluster as engine_cluster
from kipproducer.mirror.fetcher import FetchReader

PARTITIONS = 3  # leaders: brokers 1, 2, 3


def _write(bootstrap: str, topic: str, count: int, partitions: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, b"v%d" % i, partition=partitions[i % len(partitions)])
    assert p.flush(30) == 0


def _read_until(reader: FetchReader, ends: dict[int, int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    reached: dict[int, int] = {}
    while any(reached.get(p, -1) < end for p, end in ends.items()):
        assert time.monotonic() < deadline, f"read {reached}, wanted {ends}"
        for fetched in reader.poll(0.1):
            reached[fetched.partition] = max(reached.get(fetched.partition, -1),
                                             fetched.next_offset)


def test_fetch_reader_backs_off_from_a_dead_leader_and_reads_the_others(
        mock_cluster: MockCluster, monkeypatch) -> None:
    topic = unique("fetch-backoff")
    mock_cluster.create_topic(topic, PARTITIONS)
    _write(mock_cluster.bootstrap, topic, 300, [0, 1, 2])
    attempts: Counter[int] = Counter()
    refreshes = [0]
    attempt, refresh = engine_cluster.Cluster._attempt, engine_cluster.Cluster.refresh

    def counted(self, node_id: int, host: str, port: int) -> None:
        attempt(self, node_id, host, port)  # raises BrokerBackoff inside the backoff
        attempts[node_id] += 1

    async def counted_refresh(self, topics=None) -> None:
        refreshes[0] += 1
        await refresh(self, topics)

    monkeypatch.setattr(engine_cluster.Cluster, "_attempt", counted)
    monkeypatch.setattr(engine_cluster.Cluster, "refresh", counted_refresh)
    reader = FetchReader({"bootstrap.servers": mock_cluster.bootstrap}, "read_uncommitted",
                         timeout=30)
    try:
        reader.assign({(topic, p): 0 for p in range(PARTITIONS)})
        _read_until(reader, {0: 100, 1: 100, 2: 100}, 30)
        mock_cluster.broker_down(2)  # partition 1's leader, and it stays its leader
        down_at = time.monotonic()
        before, refreshed_before = attempts[2], refreshes[0]
        _write(mock_cluster.bootstrap, topic, 200, [0, 2])
        _read_until(reader, {0: 200, 2: 200}, 30)  # the other leaders are read meanwhile
        while time.monotonic() - down_at < 3.0:  # keep reading: a full queue stops the reader
            reader.poll(0.05)
        # Dialled again at most once or twice (right after the lost connection, before the
        # metadata stops listing it), never round after round.
        assert attempts[2] - before <= 2, attempts
        asked = refreshes[0] - refreshed_before
        # 0.1, 0.2, 0.4, 0.8, 1 s apart, plus the refresh after the lost connection: about 7
        # in 3 s (asking every round, without the backoff, made 24 here).
        assert 1 <= asked <= 10, f"{asked} metadata requests in 3 s"
        mock_cluster.broker_up(2)
        _write(mock_cluster.bootstrap, topic, 30, [1])
        _read_until(reader, {1: 130}, 30)  # back: its partition is read again
    finally:
        reader.close()
