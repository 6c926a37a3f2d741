"""``kip mirror --engine spark``: a one-time, offset-preserving copy of many topics as one
Spark job (a backfill), resumable from the target's log ends.

1. The source topics matching ``--topics`` get their target topics (created with the
   source's partition count and configs, grown when smaller: the mirror's TopicMap).
2. For every partition the copy starts at the larger of the source's log start and the
   target's log end (a rerun or a resumed backfill reads only what is missing) and ends at the
   source's end as it was when the job was planned (the last stable offset under
   read_committed).
3. One Spark job: ``spark.read.format("kip")`` (one Spark partition per Kafka partition: a
   partition's records must reach the target in offset order from one task) into the sink's
   offsets mode (KIP-391, every record at its source offset; a task skips what lies below the
   target's log end, so a retried task continues too).
4. A target partition whose log start lies below the source's is trimmed to it
   (DeleteRecords), as the mirror's preserve mode does. DeleteRecords cannot go past a log
   end, so a target partition that ends below the source's log start (nothing of the source
   lay after it: a source trimmed to its end) is first filled up to it with aborted fillers
   (the stock-cluster emulation's ``pad_to``, docs/stock-clusters.md; any broker with
   transactions takes them, no read_committed reader sees them, and the trim drops them).

Needs a target that takes KIP-391 offsets (the reference broker). Consumer group offsets are
not copied (``kip mirror`` without ``--engine spark`` does that).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kipproducer.spark")


@dataclass
class BackfillResult:
    """What a backfill planned and found: per (target topic, partition)."""

    starts: dict[tuple[str, int], int] = field(default_factory=dict)  # where the copy began
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # the source end copied to
    topics: int = 0
    elapsed_s: float = 0.0

    @property
    def partitions(self) -> int:
        return len(self.starts)

    @property
    def offsets(self) -> int:
        """Source offsets the job covered (records plus holes and markers)."""
        return sum(self.ends[k] - self.starts[k] for k in self.starts)


def _ends(admin: Any, topics: Mapping[str, int], spec: str, isolation: str) -> dict:
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    level = (IsolationLevel.READ_COMMITTED if isolation == "read_committed"
             else IsolationLevel.READ_UNCOMMITTED)
    wanted = {TopicPartition(t, p): OffsetSpec.earliest() if spec == "earliest"
              else OffsetSpec.latest() for t, n in topics.items() for p in range(n)}
    if not wanted:
        return {}
    found = admin.list_offsets(wanted, isolation_level=level, request_timeout=60)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in found.items()}


def backfill(spark: Any, source: str, target: str, pattern: str, *,
             source_config: Mapping[str, str] | None = None,
             target_config: Mapping[str, str] | None = None,
             isolation: str = "read_committed", rename: str = "{topic}") -> BackfillResult:
    """Copy every source topic matching ``pattern`` to ``target`` with its offsets, in one
    Spark job on ``spark`` (a SparkSession with ``format("kip")`` registered)."""
    from pyspark.sql import functions as F

    from ..clients import connection_properties
    from ..mirror.topics import TopicMap

    t0 = time.perf_counter()
    src_conf = connection_properties({"bootstrap.servers": source, **(source_config or {})})
    dst_conf = connection_properties({"bootstrap.servers": target, **(target_config or {})})
    topics = TopicMap(src_conf, dst_conf, pattern, rename)
    try:
        pairs = {p.source: p for p in topics.refresh()}
        result = BackfillResult(topics=len(pairs))
        if not pairs:
            return result
        counts = {name: pair.partitions for name, pair in pairs.items()}
        src_starts = _ends(topics.source_admin, counts, "earliest", isolation)
        src_ends = _ends(topics.source_admin, counts, "latest", isolation)
        dst_counts = {pair.target: pair.partitions for pair in pairs.values()}
        dst_starts = _ends(topics.target_admin, dst_counts, "earliest", "read_uncommitted")
        dst_ends = _ends(topics.target_admin, dst_counts, "latest", "read_uncommitted")
        starting: dict[str, dict[str, int]] = {}
        ending: dict[str, dict[str, int]] = {}
        for (name, p), end in src_ends.items():
            dst = (pairs[name].target, p)
            start = max(src_starts[(name, p)], dst_ends[dst])
            result.starts[dst], result.ends[dst] = start, max(start, end)
            starting.setdefault(name, {})[str(p)] = start
            ending.setdefault(name, {})[str(p)] = max(start, end)
        if result.offsets:
            reader = (spark.read.format("kip").options(**{
                f"kafka.{k}": str(v) for k, v in src_conf.items() if k != "logger"})
                .option("assign", json.dumps({n: list(range(c)) for n, c in counts.items()}))
                .option("startingOffsets", json.dumps(starting))
                .option("endingOffsets", json.dumps(ending))
                .option("includeHeaders", "true")
                .option("kafka.isolation.level", isolation).load())
            renamed = F.col("topic")
            if rename != "{topic}":
                mapping = F.create_map(*[F.lit(x) for name, pair in pairs.items()
                                         for x in (name, pair.target)])
                renamed = mapping[F.col("topic")]
            (reader.select("key", "value", "headers", "partition", "offset", "timestamp",
                           renamed.alias("topic"))
             .write.format("kip").options(**{f"kafka.{k}": str(v) for k, v in dst_conf.items()
                                                if k != "logger"})
             .option("kip.mode", "offsets").mode("append").save())
        wanted = {(pairs[n].target, p): o for (n, p), o in src_starts.items()}
        _fill_to_log_starts(dst_conf, topics.target_admin, wanted, dst_starts)
        _trim(topics.target_admin, wanted, dst_starts)
    finally:
        topics.close()
    result.elapsed_s = time.perf_counter() - t0
    return result


def _fill_to_log_starts(target_conf: Mapping[str, Any], admin: Any,
                        wanted: Mapping[tuple[str, int], int],
                        have: Mapping[tuple[str, int], int]) -> None:
    """Target partitions to be trimmed whose log ends below the wanted log start are filled
    up to it: one aborted transaction of tiny fillers each (KIP-391 emulation), written by a
    transactional id fixed per set of target topics, so a rerun after a kill fences the
    killed writer's open transaction before it reads the log end."""
    import hashlib

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from ..mirror.topics import MirrorError
    from ..producer import Producer, emulation_of

    trimmed = {k: o for k, o in wanted.items() if o > have[k]}
    if not trimmed:
        return
    found = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in trimmed},
                               request_timeout=60)
    short = {(tp.topic, tp.partition): trimmed[(tp.topic, tp.partition)]
             for tp, f in found.items() if f.result().offset < trimmed[(tp.topic, tp.partition)]}
    if not short:
        return
    names = ",".join(sorted({t for t, _ in short}))
    writer = "kip-backfill-" + hashlib.sha256(names.encode()).hexdigest()[:16]
    producer = Producer({**target_conf, "kip.mode": "emulated",
                         "kip.emulation.transactional.id": writer})
    try:
        emulation = emulation_of(producer)
        for (topic, p), start in sorted(short.items()):
            if emulation.log_end(topic, p) < start and not emulation.pad_to(topic, p, start):
                raise MirrorError(f"target {topic}[{p}] not filled up to the source's log "
                                  f"start {start}, so its log start cannot be moved there")
            log.info("target %s-%d: filled up to %d for its log start", topic, p, start)
    finally:
        producer.close()


def _trim(admin: Any, wanted: Mapping[tuple[str, int], int],
          have: Mapping[tuple[str, int], int]) -> None:
    """DeleteRecords on target partitions whose log start lies below the source's."""
    from confluent_kafka import TopicPartition

    moves = [TopicPartition(t, p, o) for (t, p), o in wanted.items() if o > have[(t, p)]]
    if moves:
        for tp, future in admin.delete_records(moves, request_timeout=60).items():
            future.result()
            log.info("target %s-%d: log start moved to %d", tp.topic, tp.partition, tp.offset)


# ---- the command line hook (kip mirror --engine spark) ------------------------------------------


def run_cli(args: Any, source_config: dict[str, str], target_config: dict[str, str]) -> int:
    """``kip mirror --engine spark``: the backfill on a session of ``--spark-master``."""
    import sys

    from ..mirror.topics import MirrorError
    from . import session, unavailable_reason

    refused = [flag for flag, given in (("--mode transactional", args.mode != "preserve"),
                                        ("--group", args.group is not None),
                                        ("--transactional-id", args.transactional_id),
                                        ("--metrics-json", args.metrics_json)) if given]
    if refused:
        print(f"kip mirror: --engine spark is a one-time offset-preserving backfill: "
              f"{', '.join(refused)} not supported with it", file=sys.stderr)
        return 2
    missing = unavailable_reason()
    if missing is not None:
        print(f"kip mirror: --engine spark: {missing}", file=sys.stderr)
        return 2
    spark = session(args.spark_master, "kip-mirror-backfill",
                    {"spark.ui.enabled": "false"})
    try:
        result = backfill(spark, args.source, args.target, args.topics,
                          source_config=source_config, target_config=target_config,
                          isolation=args.isolation, rename=args.rename)
    except (MirrorError, ValueError) as exc:
        print(f"kip mirror: {exc}", file=sys.stderr)
        return 1
    print(f"kip mirror: {result.topics} topics, {result.partitions} partitions, "
          f"{result.offsets:,} source offsets copied in {result.elapsed_s:.1f} s "
          f"(engine spark, {args.spark_master}); offsets kept", file=sys.stderr)
    return 0
