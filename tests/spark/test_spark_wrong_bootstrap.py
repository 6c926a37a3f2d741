"""A wrong kafka.bootstrap.servers for the kip source: the driver's partition discovery fails
at once with one error naming the address, and nothing more reaches stderr than a few lines
(no metadata timeout, no librdkafka log wall)."""

from __future__ import annotations

import time

import pytest

MAX_STDERR_LINES = 3



def test_wrong_bootstrap_names_the_address_at_once(spark, capfd, dead_address) -> None:
    capfd.readouterr()  # what the session's start wrote
    took = []
    for _ in range(2):  # the first also starts Spark's Python planner worker: the second is timed
        started = time.monotonic()
        with pytest.raises(Exception) as info:
            (spark.read.format("kip").option("kafka.bootstrap.servers", dead_address)
             .option("subscribe", "orders").load().count())
        took.append(time.monotonic() - started)
        text = str(info.value)
        assert "no broker could be reached" in text and dead_address in text, text[-3000:]
    # the admin client's metadata timeout is 30 s
    assert took[1] < 15, f"{took} s: the error waited for a metadata timeout"
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) <= MAX_STDERR_LINES, "\n".join(err[-50:])
