"""The Spark source's unit of work, one Kafka offset range: planned on the driver
(source.py), read by a task (fetch_read.py or source.py's librdkafka reader)."""

from __future__ import annotations

from dataclasses import dataclass

# pyspark is there: the package refuses to import without it (__init__.py)
from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class OffsetRange(InputPartition):  # type: ignore[misc]
    """One task's share: records of ``topic[partition]`` with offsets in [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
