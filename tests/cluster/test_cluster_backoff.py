"""The engine's reconnect backoff and metadata refresh settings (librdkafka's names and
defaults), on a fake clock: no broker needed."""

from __future__ import annotations

import pytest

from kipproducer.engine import cluster as cluster_module
from kipproducer.engine.cluster import BrokerBackoff, Cluster
from kipproducer.engine.config import EngineConfig


def test_config_names_and_defaults():
    config = EngineConfig.from_properties({"bootstrap.servers": "h:1"})
    assert (config.reconnect_backoff_ms, config.reconnect_backoff_max_ms,
            config.metadata_refresh_ms) == (100, 10_000, 300_000)
    config = EngineConfig.from_properties({
        "bootstrap.servers": "h:1", "reconnect.backoff.ms": "20",
        "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": -1})
    assert (config.reconnect_backoff_ms, config.reconnect_backoff_max_ms,
            config.metadata_refresh_ms) == (20, 500, -1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(cluster_module.time, "monotonic", clock.monotonic)
    return clock


def test_reconnect_backoff_doubles_with_jitter_caps_and_starts_over(clock, monkeypatch):
    jitter = []

    def uniform(low: float, high: float) -> float:
        jitter.append((low, high))
        return high  # the longest wait the jitter allows

    monkeypatch.setattr(cluster_module.random, "uniform", uniform)
    c = Cluster([("h", 1)], "c", request_timeout_s=1, connect_timeout_s=1,
                reconnect_backoff_ms=100, reconnect_backoff_max_ms=1000)
    waits = []
    for _ in range(6):
        c._attempt(1, "h", 1)  # allowed now
        next_at = c._reconnect[1][0]
        waits.append(round((next_at - clock.now) * 1000))
        with pytest.raises(BrokerBackoff):
            c._attempt(1, "h", 1)  # too early: refused at once, metadata marked stale
        assert c.stale
        c.stale = False
        clock.now = next_at
    # 100 ms doubling, each with -25%..+50% jitter (here +50%), capped at the max
    assert jitter[:4] == [(75, 150), (150, 300), (300, 600), (600, 1200)]
    assert waits == [150, 300, 600, 1000, 1000, 1000]
    # Another broker has its own backoff.
    c._attempt(2, "h", 2)
    # Attempts more than reconnect.backoff.max.ms apart: back to reconnect.backoff.ms.
    clock.now += 1.001 + 1.0
    c._attempt(1, "h", 1)
    assert jitter[-1] == (75, 150)
