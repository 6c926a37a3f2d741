"""Fixtures for the Spark tests: one SparkSession for the whole test session (its start costs
tens of seconds), local[2,4] so a failed task is retried, and two reference brokers.

Skipped, and saying why, without pyspark or a Java."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from spark_session import session_fixture  # noqa: E402

from kipproducer.broker.embedded import EmbeddedBroker  # noqa: E402

# The mirror tests' topic builders (compacted topics with holes, aborted transactions).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mirror"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    yield from session_fixture("kipproducer-tests")


def _broker() -> EmbeddedBroker:
    return EmbeddedBroker(config={
        "num.partitions": 3,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})


@pytest.fixture(scope="module")
def source() -> Iterator[EmbeddedBroker]:
    with _broker() as broker:
        yield broker


@pytest.fixture(scope="module")
def target() -> Iterator[EmbeddedBroker]:
    with _broker() as broker:
        yield broker
