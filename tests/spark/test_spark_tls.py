"""The Spark sink and source over TLS: format("kip") with kafka.security.protocol=SSL writes
through the engine's TLS connections, exactly once, and reads back over TLS."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kipproducer.broker.embedded import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tls"))
from tls_support import broker_tls, make_certs, rdkafka_ssl  # noqa: E402

ROWS = 20_000


@pytest.fixture(scope="module")
def tls_target():
    certs = make_certs(Path(tempfile.mkdtemp(prefix="kip-spark-certs-")))
    config = broker_tls(certs, listeners="SSL://127.0.0.1:0", **{"num.partitions": "3"})
    with EmbeddedBroker(config=config) as broker:
        yield broker, certs


def test_sink_and_source_over_tls(spark, tls_target) -> None:
    broker, certs = tls_target
    conf = rdkafka_ssl(broker.listener_address("SSL"), certs)
    options = {f"kafka.{k}": v for k, v in conf.items()}
    topic = "spark-tls"
    rows = (spark.range(ROWS, numPartitions=4)
            .select(F.concat(F.lit("k"), F.col("id").cast("string")).cast("binary").alias("key"),
                    F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary")
                    .alias("value")))
    rows.write.format("kip").options(**options).option("topic", topic).mode("append").save()
    back = (spark.read.format("kip").options(**options).option("subscribe", topic)
            .option("kafka.isolation.level", "read_committed").load())
    values = sorted(r.value for r in back.select("value").collect())
    assert values == sorted(b"v%d" % i for i in range(ROWS))
