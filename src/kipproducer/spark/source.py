"""``spark.read.format("kip")`` / ``spark.readStream.format("kip")``: Kafka records as a
DataFrame, with the options and columns of Spark's built-in Kafka source.

The driver asks the cluster for partitions and offsets with the project's own client
(driver_client.py) and plans one Spark partition per Kafka offset range [start, end) (more
with ``minPartitions``); a task reads its range with the project's Fetch reader
(fetch_read.py; a librdkafka consumer only where that reader cannot connect), which is only
assigned, never subscribed (it joins no group, commits nothing). A range ends at its end
offset even when the last offsets hold no record for this reader (compacted away,
transaction markers, aborted records under read_committed): the fetch position says how far
the log was read, so the task never waits for a record that cannot come.
"""

from __future__ import annotations

import math
import re
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# pyspark is there: the package refuses to import without it (__init__.py)
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from .driver_client import DriverClient, driver_client
from .offset_range import OffsetRange
from .options import (
    OptionError,
    kafka_properties,
    lower_keys,
    parse_bool,
    parse_duration_ms,
    parse_int,
    parse_json,
)

EARLIEST, LATEST = -2, -1  # Spark's (and Kafka's ListOffsets') codes in offset JSON
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"
#: Records per Arrow batch handed to Spark.
BATCH_ROWS = 8192


def schema(options: Mapping[str, str]) -> str:
    opts = lower_keys(options)
    return SCHEMA + (", " + HEADERS if parse_bool(opts, "includeHeaders", False) else "")


def check_reachable(bootstrap: str, timeout_s: float = 10.0) -> None:
    """OptionError naming the addresses when no bootstrap server accepts a TCP connection (a
    wrong kafka.bootstrap.servers): one line at once, not a metadata timeout deep in a Spark
    trace. A server that accepts is left to the clients (TLS, SASL, ...)."""
    failures = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.split("://")[-1].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {exc}")
    raise OptionError(f"option 'kafka.bootstrap.servers': no broker could be reached "
                      f"({'; '.join(failures) or 'no address given'})")


class ReadPlan:
    """The driver's side: which partitions, which offsets (options checked once, here)."""

    def __init__(self, options: Mapping[str, str], *, streaming: bool) -> None:
        opts = lower_keys(options)
        self.options = opts
        self.props = kafka_properties(opts, writing=False)
        self.isolation = self.props.get("isolation.level", "read_uncommitted")
        if self.isolation not in ("read_committed", "read_uncommitted"):
            raise OptionError("option 'kafka.isolation.level' must be read_committed or "
                              f"read_uncommitted, got {self.isolation!r}")
        given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
        if len(given) != 1:
            raise OptionError("exactly one of the options 'subscribe', 'subscribePattern' or "
                              f"'assign' is required (got {len(given)})")
        self.how = given[0]
        if self.how == "assign":
            assigned = parse_json(opts, "assign")
            if not isinstance(assigned, dict) or not all(
                    isinstance(v, list) for v in assigned.values()):
                raise OptionError("option 'assign' must be JSON like "
                                  '{"topicA":[0,1],"topicB":[2,4]}')
            self.assigned = {str(t): [int(p) for p in ps] for t, ps in assigned.items()}
        elif self.how == "subscribe":
            self.topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not self.topics:
                raise OptionError("option 'subscribe' names no topic")
        else:
            try:
                self.pattern = re.compile(opts["subscribepattern"])
            except re.error as exc:
                raise OptionError(f"option 'subscribePattern' is not a regex: {exc}") from None
        self.streaming = streaming
        self._client: DriverClient | None = None  # made on first use (client())
        self.starting = opts.get("startingoffsets", "latest" if streaming else "earliest")
        self.ending = opts.get("endingoffsets", "latest")
        if streaming and "endingoffsets" in opts:
            raise OptionError("option 'endingOffsets' is for batch queries only")
        self.min_partitions = parse_int(opts, "minPartitions", 0, 1) if "minpartitions" in opts \
            else 0
        self.fail_on_data_loss = parse_bool(opts, "failOnDataLoss", True)
        self.include_headers = parse_bool(opts, "includeHeaders", False)
        self.poll_timeout_ms = parse_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000, 1)
        if not streaming and self.ending.strip().lower() == "earliest":
            raise OptionError("option 'endingOffsets' cannot be 'earliest' (nothing to read)")
        # Offsets by timestamp: the global form wins over the per-partition one, which wins
        # over startingOffsets / endingOffsets (Spark's order).
        self.starting_ts = self._timestamps("startingTimestamp", "startingOffsetsByTimestamp")
        self.ending_ts = self._timestamps("endingTimestamp", "endingOffsetsByTimestamp")
        if streaming and self.ending_ts is not None:
            raise OptionError("options 'endingTimestamp' / 'endingOffsetsByTimestamp' are for "
                              "batch queries only")
        self.ts_strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if self.ts_strategy not in ("error", "latest"):
            raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or "
                              f"latest, got {self.ts_strategy!r}")
        if not streaming:
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if name.lower() in opts:
                    raise OptionError(f"option '{name}' is for streaming queries only")
        self.max_offsets = (parse_int(opts, "maxOffsetsPerTrigger", 0, 1)
                            if "maxoffsetspertrigger" in opts else None)
        # A micro-batch waits until it has minOffsetsPerTrigger new offsets, or until
        # maxTriggerDelay has passed since the last one ran (Spark's Kafka source rule).
        self.min_offsets = (parse_int(opts, "minOffsetsPerTrigger", 0, 1)
                            if "minoffsetspertrigger" in opts else None)
        self.max_trigger_delay_ms = parse_duration_ms(opts, "maxTriggerDelay", 15 * 60_000)
        if (self.min_offsets is not None and self.max_offsets is not None
                and self.min_offsets > self.max_offsets):
            raise OptionError(f"option 'minOffsetsPerTrigger' ({self.min_offsets}) is larger "
                              f"than 'maxOffsetsPerTrigger' ({self.max_offsets}): no "
                              "micro-batch could satisfy both")

    def _timestamps(self, one: str, each: str) -> int | dict[tuple[str, int], int] | None:
        """A timestamp (ms) for every partition, or one per partition, or None."""
        if one.lower() in self.options:
            return parse_int(self.options, one, 0)
        if each.lower() not in self.options:
            return None
        given = parse_json(self.options, each)
        if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
            raise OptionError(f"option '{each}' must be JSON like "
                              '{"topicA":{"0":1700000000000,"1":-1}}')
        try:
            return {(str(t), int(p)): int(ts) for t, parts in given.items()
                    for p, ts in parts.items()}
        except (TypeError, ValueError):
            raise OptionError(f"option '{each}': partitions and timestamps must be integers") \
                from None

    # ---- metadata -----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader (and so this plan) for its tasks: the driver's client, its
        # sockets and event loop thread stay on the driver.
        return {**self.__dict__, "_client": None}

    def client(self) -> DriverClient:
        """The driver's metadata / ListOffsets client, made once and kept (a streaming
        query's micro-batches reuse its connections)."""
        if self._client is None:
            check_reachable(self.props["bootstrap.servers"])
            self._client = driver_client(self.props, self.isolation)
        return self._client

    def close(self) -> None:
        """Close the driver's client (made again when asked for once more)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) the options select, as the cluster has them now."""
        client = self.client()
        if self.how == "assign":
            counts = client.partition_counts(sorted(self.assigned))
            for topic, parts in self.assigned.items():
                count = counts.get(topic)
                if count is None:
                    raise OptionError(f"option 'assign': topic {topic!r} does not exist")
                missing = sorted(p for p in set(parts) if not 0 <= p < count)
                if missing:
                    raise OptionError(
                        f"option 'assign': topic {topic!r} has {count} partitions "
                        f"(0-{count - 1}); partitions {missing} do not exist")
            return sorted((t, p) for t, ps in self.assigned.items() for p in ps)
        if self.how == "subscribe":
            counts = client.partition_counts(self.topics)
        else:  # internal topics (__consumer_offsets, ...) are not matched, as in Kafka
            counts = {t: n for t, n in client.partition_counts(None).items()
                      if not t.startswith("__") and self.pattern.fullmatch(t)}
        return sorted((t, p) for t, n in counts.items() for p in range(n))

    def list_offsets(self, tps: Sequence[tuple[str, int]], which: int) -> dict[tuple[str, int],
                                                                             int]:
        """The earliest offset, or the latest (the last stable offset under read_committed,
        the high watermark otherwise) of each partition."""
        return self.client().list_offsets({tp: which for tp in tps})

    def offsets_for_times(self, tps: Sequence[tuple[str, int]],
                          timestamps: Mapping[tuple[str, int], int]) -> dict[tuple[str, int],
                                                                            int]:
        """The first offset whose record's timestamp is at or after the given one, per
        partition; -1 when no record is that recent (ListOffsets by timestamp)."""
        return self.client().list_offsets({tp: timestamps[tp] for tp in tps})

    def _by_timestamp(self, given: int | Mapping[tuple[str, int], int], name: str,
                      tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        stamps = ({tp: given for tp in tps} if isinstance(given, int) else dict(given))
        missing = [f"{t}-{p}" for t, p in tps if (t, p) not in stamps]
        if missing:
            raise OptionError(f"option '{name}' gives no timestamp for {', '.join(missing)}")
        # -2 / -1 in place of a timestamp: earliest / latest, as in the offset options
        codes = {tp: stamps[tp] for tp in tps if stamps[tp] in (EARLIEST, LATEST)}
        found = self.offsets_for_times([tp for tp in tps if tp not in codes], stamps)
        for code in (EARLIEST, LATEST):
            found.update(self.list_offsets([tp for tp, c in codes.items() if c == code], code))
        return found

    def starting_offsets(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where reading starts: by timestamp when given, else startingOffsets."""
        if self.starting_ts is None:
            # a streaming query starts partitions its JSON leaves out at their end
            missing = LATEST if self.streaming else (
                None if self.starting.strip().startswith("{") else EARLIEST)
            return self.resolve(self.starting, "startingOffsets", tps, missing=missing)
        found = self._by_timestamp(self.starting_ts, "startingOffsetsByTimestamp", tps)
        none = [tp for tp, o in found.items() if o < 0]
        if none and self.ts_strategy == "error":
            raise OptionError(
                "no record at or after the starting timestamp in "
                f"{', '.join(f'{t}-{p}' for t, p in none)} (set "
                "startingOffsetsByTimestampStrategy=latest to start at the end there)")
        latest = self.list_offsets(tps, LATEST)
        # Never past the end a reader may read to (the last stable offset under
        # read_committed); "latest" for partitions without a record that recent.
        return {tp: latest[tp] if o < 0 else min(o, latest[tp]) for tp, o in found.items()}

    def ending_offsets(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where a batch read ends: by timestamp when given (latest where no record is that
        recent, as Spark's source), else endingOffsets."""
        if self.ending_ts is None:
            return self.resolve(self.ending, "endingOffsets", tps,
                                missing=LATEST if self.ending.strip().startswith("{")
                                else None)
        found = self._by_timestamp(self.ending_ts, "endingOffsetsByTimestamp", tps)
        latest = self.list_offsets(tps, LATEST)
        return {tp: latest[tp] if o < 0 else min(o, latest[tp]) for tp, o in found.items()}

    def resolve(self, spec: str, name: str, tps: Sequence[tuple[str, int]],
                missing: int | None = None) -> dict[tuple[str, int], int]:
        """startingOffsets / endingOffsets: earliest, latest or JSON with -2 / -1."""
        word = spec.strip().lower()
        if word in ("earliest", "latest"):
            return self.list_offsets(tps, EARLIEST if word == "earliest" else LATEST)
        given = parse_json({name.lower(): spec}, name)
        if not isinstance(given, dict):
            raise OptionError(f"option '{name}' must be earliest, latest or JSON like "
                              '{"topicA":{"0":23,"1":-2}}')
        out: dict[tuple[str, int], int] = {}
        for topic, parts in given.items():
            if not isinstance(parts, dict):
                raise OptionError(f"option '{name}': {topic} must map partitions to offsets")
            for part, offset in parts.items():
                out[(str(topic), int(part))] = int(offset)
        for tp in tps:
            if tp not in out:
                if missing is None:
                    raise OptionError(f"option '{name}' gives no offset for {tp[0]}-{tp[1]}")
                out[tp] = missing
        codes = {tp: o for tp, o in out.items() if o < 0 and tp in set(tps)}
        if name == "endingOffsets" and any(o == EARLIEST for o in codes.values()):
            raise OptionError("option 'endingOffsets' cannot use -2 (earliest)")
        if name == "startingOffsets" and not self.streaming and any(
                o == LATEST for o in codes.values()):
            raise OptionError("option 'startingOffsets' cannot use -1 (latest) in a batch "
                              "query")
        for code in (EARLIEST, LATEST):
            wanted = [tp for tp, o in codes.items() if o == code]
            out.update(self.list_offsets(wanted, code))
        return {tp: out[tp] for tp in tps}

    def ranges(self, start: Mapping[tuple[str, int], int],
               end: Mapping[tuple[str, int], int]) -> list[OffsetRange]:
        ranges = []
        for tp, until in sorted(end.items()):
            since = start.get(tp, 0)
            if since > until:
                raise OptionError(f"{tp[0]}-{tp[1]}: starting offset {since} is after the "
                                  f"ending offset {until}")
            if until > since:
                ranges.append(OffsetRange(tp[0], tp[1], since, until))
        return split(ranges, self.min_partitions)


def split(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges when there are enough offsets: the larger ranges
    are cut in equal parts, in proportion to their size (as Spark's Kafka source does)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(size, math.ceil(size * min_partitions / total)))
        for i in range(parts):
            lo = r.start + size * i // parts
            hi = r.start + size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def cap(start: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int],
        limit: int) -> dict[tuple[str, int], int]:
    """``end`` moved back so that at most ``limit`` offsets lie between ``start`` and it,
    shared in proportion to each partition's backlog (maxOffsetsPerTrigger). Each partition
    gets the floor of its share; the offsets left over go one each to the partitions with the
    largest backlog left, so the total is exactly ``limit`` when there is that much."""
    backlog = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    share = {tp: n * limit // total for tp, n in backlog.items()}
    left = limit - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: (share[tp] - backlog[tp], tp))[:left]:
        share[tp] += 1
    return {tp: start.get(tp, end[tp]) + share[tp] for tp in end}


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset form: {"topic": {"0": 23}} (partitions as strings)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


# ---- the task side ------------------------------------------------------------------------------


def read_range(props: Mapping[str, str], options: Mapping[str, str],
               part: OffsetRange) -> Iterator[Any]:
    """Arrow batches of the records of ``part``, in offset order: with the project's own
    Fetch client (fetch_read.py), or librdkafka where that client cannot go."""
    from . import fetch_read

    if fetch_read.unsupported(props) is not None:
        return read_range_librdkafka(props, options, part)
    return fetch_read.read_range(
        props, part, isolation=props.get("isolation.level", "read_uncommitted"),
        include_headers=parse_bool(options, "includeHeaders", False),
        fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
        poll_timeout_s=parse_int(options, "kafkaConsumer.pollTimeoutMs", 120_000, 1) / 1000)


def read_range_librdkafka(props: Mapping[str, str], options: Mapping[str, str],
                          part: OffsetRange) -> Iterator[Any]:
    """Arrow batches of the records of ``part``, in offset order, read with a librdkafka
    consumer (a Python object per record: the slow path, for what the Fetch client cannot
    speak, such as SASL GSSAPI)."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    include_headers = parse_bool(options, "includeHeaders", False)
    fail_on_data_loss = parse_bool(options, "failOnDataLoss", True)
    poll_timeout = parse_int(options, "kafkaConsumer.pollTimeoutMs", 120_000, 1) / 1000
    conf: dict[str, Any] = {
        "isolation.level": "read_uncommitted", **props,
        "log_level": int(props.get("log_level", 3)),
        # assigned, never subscribed: the group id only satisfies librdkafka; nothing is
        # committed to it and it is never joined
        "group.id": f"kip-spark-reader-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False, "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest"}
    consumer = Consumer(conf)
    columns: dict[str, list] = {name: [] for name in (
        "key", "value", "offset", "timestamp", "timestampType", "headers")}
    schema_fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                     ("partition", pa.int32()), ("offset", pa.int64()),
                     ("timestamp", pa.timestamp("us", tz="UTC")),
                     ("timestampType", pa.int32())]
    if include_headers:
        schema_fields.append(("headers", pa.list_(pa.struct([("key", pa.string()),
                                                              ("value", pa.binary())]))))
    arrow_schema = pa.schema(schema_fields)

    def batch() -> Any:
        n = len(columns["offset"])
        arrays = [pa.array(columns["key"], pa.binary()), pa.array(columns["value"], pa.binary()),
                  pa.array([part.topic] * n, pa.string()),
                  pa.array([part.partition] * n, pa.int32()),
                  pa.array(columns["offset"], pa.int64()),
                  pa.array(columns["timestamp"], pa.int64()).cast(
                      pa.timestamp("us", tz="UTC")),
                  pa.array(columns["timestampType"], pa.int32())]
        if include_headers:
            arrays.append(pa.array(columns["headers"], arrow_schema.field("headers").type))
        for values in columns.values():
            values.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        position = part.start
        last_progress = time.monotonic()
        while position < part.end:
            messages = consumer.consume(BATCH_ROWS, 0.2)
            if not messages:
                if time.monotonic() - last_progress > poll_timeout:
                    raise TimeoutError(
                        f"{part.topic}-{part.partition}: nothing read for {poll_timeout:.0f} s "
                        f"at offset {position}, range [{part.start}, {part.end}) "
                        "(an open transaction under read_committed? records deleted?)")
                continue
            last_progress = time.monotonic()
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The fetch position: past markers and skipped aborted records too.
                        position = max(position, m.offset())
                        continue
                    if error.code() == KafkaError._AUTO_OFFSET_RESET:
                        raise RuntimeError(
                            f"{part.topic}-{part.partition}: offsets from {position} are no "
                            "longer in the log (deleted by retention or DeleteRecords); set "
                            "failOnDataLoss=false to read what is left")
                    raise KafkaException(error)
                offset = m.offset()
                if offset >= part.end:
                    position = offset
                    break
                position = offset + 1
                columns["key"].append(m.key())
                columns["value"].append(m.value())
                columns["offset"].append(offset)
                kind, stamp = m.timestamp()
                # confluent: 0 none, 1 create time, 2 log append time; Spark: -1, 0, 1
                columns["timestamp"].append(stamp * 1000 if kind else None)
                columns["timestampType"].append(kind - 1)
                if include_headers:
                    columns["headers"].append(
                        [{"key": k, "value": v} for k, v in (m.headers() or ())])
            if len(columns["offset"]) >= BATCH_ROWS:
                yield batch()
        if columns["offset"]:
            yield batch()
    finally:
        consumer.close()


class KipBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str]) -> None:
        self.plan = ReadPlan(options, streaming=False)
        self.props = self.plan.props
        self.options = self.plan.options

    def partitions(self) -> Sequence[OffsetRange]:
        try:
            tps = self.plan.partitions()
            start = self.plan.starting_offsets(tps)
            end = self.plan.ending_offsets(tps)
        finally:
            self.plan.close()  # a batch read plans once
        ranges = self.plan.ranges(start, end)
        # Spark runs a read with no partition as one with a single empty partition.
        return ranges or [OffsetRange("", -1, 0, 0)]

    def read(self, partition: OffsetRange) -> Iterator[Any]:
        if partition.partition < 0:
            return iter(())
        return read_range(self.props, self.options, partition)


class KipStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Offsets as Spark's Kafka source checkpoints them: {"topic": {"partition": offset}}."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.plan = ReadPlan(options, streaming=True)
        self.props = self.plan.props
        self.options = self.plan.options
        self.target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end
        # When the last micro-batch was let through (minOffsetsPerTrigger); 0: none yet, so
        # a query's first trigger never waits.
        self.last_trigger_ms = 0.0
        # The partitions' ends at the last latestOffset() call, before any limit: what
        # reportLatestOffset() shows in the query's progress (lag = these - endOffset).
        self.latest_seen: dict[tuple[str, int], int] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the ends as they are now, in as many micro-batches
        as maxOffsetsPerTrigger makes; partitions that appear later wait for the next run."""
        self.target = self.plan.list_offsets(self.plan.partitions(), LATEST)

    def initialOffset(self) -> dict:
        return offsets_json(self.plan.starting_offsets(self.plan.partitions()))

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.plan.max_offsets is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.plan.max_offsets)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        if self.target is not None:
            latest = dict(self.target)
        else:
            latest = self.plan.list_offsets(self.plan.partitions(), LATEST)
        since = from_json(start) if start else {}
        # A partition's end never goes back (a read_committed LSO only rises).
        for tp, offset in since.items():
            if tp in latest and latest[tp] < offset:
                latest[tp] = offset
        self.latest_seen = dict(latest)
        max_rows = getattr(limit, "max_rows", None)  # ReadMaxRows; ReadAllAvailable: none
        waits = self.plan.min_offsets is not None and self.target is None and start
        if max_rows is not None or waits:
            new = [tp for tp in latest if tp not in since]
            if new:  # read from their first record (partitions()), so counted from there
                since = {**since, **self.plan.list_offsets(new, EARLIEST)}
        if waits and self._delays(since, latest):
            return start  # the same offsets: Spark runs no micro-batch this time
        if max_rows is not None:
            latest = cap(since, latest, max_rows)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:
        """The ends of the partitions as last seen (Spark shows them as the source's
        ``latestOffset`` in each progress report, beside the micro-batch's ``endOffset``: the
        difference is how far the query is behind), or None before the first look."""
        return None if self.latest_seen is None else offsets_json(self.latest_seen)

    def _delays(self, since: Mapping[tuple[str, int], int],
                latest: Mapping[tuple[str, int], int]) -> bool:
        """minOffsetsPerTrigger: hold the next micro-batch back while fewer offsets than that
        are new, unless maxTriggerDelay has passed since the last one was let through.
        (Trigger.AvailableNow never waits: the data it is to read is all there.)"""
        now_ms = time.time() * 1000
        if now_ms - self.last_trigger_ms >= self.plan.max_trigger_delay_ms:
            self.last_trigger_ms = now_ms
            return False
        backlog = sum(max(offset - since.get(tp, 0), 0) for tp, offset in latest.items())
        if backlog < (self.plan.min_offsets or 0):
            return True
        self.last_trigger_ms = now_ms
        return False

    def partitions(self, start: dict, end: dict) -> Sequence[OffsetRange]:
        since = from_json(start)
        until = from_json(end)
        new = [tp for tp in until if tp not in since]
        if new:  # partitions (or topics) that appeared since: from their first record
            since.update(self.plan.list_offsets(new, EARLIEST))
        return self.plan.ranges(since, until)

    def read(self, partition: OffsetRange) -> Iterator[Any]:
        return read_range(self.props, self.options, partition)

    def stop(self) -> None:
        """The query ends: close the driver's connections."""
        self.plan.close()

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets; no group offsets are
        committed (as Spark's own Kafka source)."""
