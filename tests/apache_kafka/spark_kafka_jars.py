"""Spark's own Kafka connector (``spark-sql-kafka-0-10``, Spark's ``format("kafka")``) for the
benchmark that runs it beside ``format("kip")`` (bench/side_by_side_spark.py, issue 43):
its runtime classpath fetched once per machine from Maven Central into the cache
kafka_jars.py uses (``<cache>/spark-sql-kafka-<version>/lib``), handed to a SparkSession
as ``spark.jars``.

``SPARK_KAFKA_VERSION`` is the one place that names the release. pyspark here is 4.3.0,
but ``spark-sql-kafka-0-10_2.13`` 4.3.0 is not on Maven Central (checked 2026-12-05, the
newest there is 4.2.0); the connector is a separate artifact built against Spark's internal
APIs, so 4.2.0 runs on Spark 4.3.0 only because the bench shows it reading and writing every
row (its counts are checked after every run). When 4.3.0 appears, set it here.

    python tests/apache_kafka/spark_kafka_jars.py    # fetch (once), print the jars
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import kafka_jars

SPARK_KAFKA_VERSION = "4.2.0"
# Why not pyspark's own release: said with the bench's results (update it with the version).
VERSION_NOTE = ("Maven Central has no spark-sql-kafka-0-10_2.13 4.3.0, pyspark's release "
                "here (checked 2026-12-05); 4.2.0 is the newest there")
ARTIFACTS = (("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_KAFKA_VERSION),)
WHAT = f"Spark's Kafka connector (spark-sql-kafka-0-10_2.13 {SPARK_KAFKA_VERSION})"
# A jar's file name is <artifact>-<version>.jar, the version the last "-<digits>.<digits>"
# on (greedy: spark-sql-kafka-0-10_2.13-4.2.0.jar is spark-sql-kafka-0-10_2.13's).
JAR_NAME = re.compile(r"^(.+)-\d+(?:\.\d+)+[^/]*\.jar$")


def lib_dir() -> Path:
    return kafka_jars.cache_root() / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}" / "lib"


def missing() -> str | None:
    """None when the connector can run here (pyspark, a Java, and the jars cached or Maven
    to fetch them), else one line naming what is missing."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return "pyspark (pip install '.[spark]')"
    if kafka_jars.java() is None:
        return "no Java (java on PATH or JAVA_HOME; Debian: openjdk-17-jdk-headless)"
    if not kafka_jars.complete(lib_dir()) and shutil.which("mvn") is None:
        return (f"{WHAT}'s jars are not cached in {lib_dir()} and there is no Maven (mvn) to "
                "fetch them (Debian: maven)")
    return None


def require_in_tests() -> None:
    kafka_jars.require(missing(), WHAT)


def fetch() -> Path:
    return kafka_jars.maven_copy(ARTIFACTS, lib_dir(), WHAT)


def artifact(jar: str) -> str:
    """The artifact a jar file name holds, without its version."""
    found = JAR_NAME.match(jar)
    return found.group(1) if found else jar


def jars() -> list[str]:
    """The connector's jars for ``spark.jars`` (fetched the first time), less those whose
    artifact pyspark ships itself (Scala's library, Spark's tags, compression codecs, slf4j):
    a second version of a class Spark already loads would be one more thing measured."""
    from pyspark.find_spark_home import _find_spark_home

    shipped = {artifact(p.name) for p in (Path(_find_spark_home()) / "jars").glob("*.jar")}
    return sorted(str(p) for p in fetch().glob("*.jar") if artifact(p.name) not in shipped)


if __name__ == "__main__":
    reason = missing()
    if reason is not None:
        sys.exit(f"cannot fetch {WHAT}: {reason}")
    print("\n".join(jars()))
