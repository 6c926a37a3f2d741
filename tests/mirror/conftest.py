"""Fixtures for the mirror tests: two reference brokers (source and target) per module, in
this process, and a per-test time limit (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kipproducer.broker.embedded import EmbeddedBroker

TEST_TIMEOUT_S = 120


@pytest.fixture
def test_time_limit_s() -> float:
    return TEST_TIMEOUT_S


@pytest.fixture(scope="module")
def source() -> Iterator[EmbeddedBroker]:
    config = {"num.partitions": 3,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}
    with EmbeddedBroker(config=config) as broker:
        yield broker


@pytest.fixture(scope="module")
def target() -> Iterator[EmbeddedBroker]:
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}
    with EmbeddedBroker(config=config) as broker:
        yield broker
