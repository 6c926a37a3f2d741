"""Producer groups under kill -9 (issue 13) on the reference broker: the scenario of
groups_kill_scenario.py in both modes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from groups_kill_scenario import kill_members_twice

from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture(params=["at-least-once", "transactional"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def kip():
    """A broker that looks for timed-out transactions twice a second (Kafka: every 10 s)."""
    config = {"num.partitions": 1,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}
    with EmbeddedBroker(config=config) as broker:
        yield SimpleNamespace(bootstrap=broker.bootstrap_servers)


@pytest.mark.timeout(180)
def test_kill_minus_nine_twice(kip, mode, tmp_path):
    kill_members_twice(kip.bootstrap, mode, tmp_path)
