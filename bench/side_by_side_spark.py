"""The kip Spark sink vs a foreachPartition with confluent-kafka's Producer, side by side in
one run (issue 14).

One `kip broker` (data dir on tmpfs when there is one) and one SparkSession (local[2] by
default). The DataFrame is N rows (12-byte keys, 100-byte values) in 8 partitions, cached in
memory before the first run, so every contender starts from the same rows. After one untimed
warm-up round, each contender writes them to its own 6-partition topic, alternating, timed
from the action's start to its end (Spark's task scheduling included for all):

- confluent foreachPartition: ``df.foreachPartition`` with a confluent_kafka.Producer per
  partition, ``produce()`` per row, ``flush()``; idempotent, acks=all. At least once: a retried
  task writes its rows again (what users write today);
- kip sink (transactional): ``df.write.format("kip")``: each task's rows in its own
  transaction through kipproducer's Producer (produce_arrays on the Arrow batches), committed
  by the driver. Exactly once for read_committed readers;
- kip write_ordered: KIP-27 expected offsets, after a shuffle by target partition and a sort.
  Exactly once for every reader.

Then the source, reading the rows back (the confluent contender's topic) into a DataFrame that
Spark materialises (a ``noop`` write):

- confluent foreachPartition consumer: an RDD of one task per Kafka partition, each a
  confluent_kafka.Consumer loop (assign, consume to the end offset) yielding rows, made a
  DataFrame (what users write today without the Maven Kafka connector);
- kip source: ``spark.read.format("kip")`` (one task per partition, Arrow batches).

With ``--masters local[1],local[2]`` the whole table is measured for each master (a new
SparkSession each) and a last table gives local[2] over local[1] per contender.

With ``--readers-only`` (issue 25) the rows are written once (by a confluent Producer: no
transaction markers) and only the two readers are measured, alternating, under their own heading.

With ``--cluster-workers 1,2`` (issue 25) the kip sink and the kip source alone run the same
way on a Spark standalone cluster of 1 and then 2 workers of one core each
(kipproducer.spark.standalone, on this machine), and a last row gives the scaling ratio.

``--raw-reader`` runs only the source's task code (kipproducer.spark.fetch_read.read_range)
in this process, without Spark, and prints its rate per CPU-second.

``--broker`` picks the broker the bench starts: ``kip`` (`kip broker`, the default) or Apache
Kafka with 1 or 3 KRaft nodes (``kafka1``, ``kafka3``; the jars the tests cache,
tests/apache_kafka). On Apache Kafka the lanes are, by default, ``format("kip")`` beside
Spark's own Kafka connector (spark-sql-kafka-0-10, ``format("kafka")``; issue 43), in one
session whose ``spark.jars`` hold the connector (tests/apache_kafka/spark_kafka_jars.py
fetches it through Maven once and names its version):

- kip sink (transactional) vs spark-sql-kafka sink: the same cached DataFrame written by each
  to its own topic (the connector's sink is at least once: a retried task writes its rows
  again);
- kip source vs spark-sql-kafka source: the same topic (the connector's sink's) read by
  each into a ``noop`` write.

Each lane's CPU (the Spark side: this process and every process under it but the brokers;
and the brokers') is measured over its timed action. ``--contenders`` runs a comma-separated
subset of all the lanes on any broker; with ``--cluster-workers`` the peer lanes run on the
standalone cluster. Every write is counted by a read_committed consumer and every read by the
DataFrame's ``count()`` after its run; a wrong count ends the bench with an error.

Usage: python bench/side_by_side_spark.py [--records N] [--repeat R]
       [--masters local[2] | --cluster-workers 1,2] [--readers-only | --raw-reader]
       [--broker kip|kafka1|kafka3] [--contenders NAMES] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench_support import (
    BROKERS,
    BenchBroker,
    apache_kafka,
    brokers_cpu,
    delete_topics,
    load_average,
    src_is_built,
    start_broker,
    tree_cpu,
    versions,
)
from results_file import machine, replace_section

HEADING = "## Spark: the kip sink vs foreachPartition with confluent-kafka (issue 14)"
READERS_HEADING = ("## Spark source: Fetch + Arrow decoding in C vs a foreachPartition "
                   "confluent Consumer (issue 25)")
PARTITIONS = 6
CONFLUENT = "confluent foreachPartition"
KIP = "kip sink (transactional)"
ORDERED = "kip write_ordered"
CONSUMER = "confluent foreachPartition consumer"
SOURCE = "kip source"
WRITERS = (CONFLUENT, KIP, ORDERED)
READERS = (CONSUMER, SOURCE)
CLUSTER = (KIP, SOURCE)  # what --cluster-workers measures
CLUSTER_HEADING = ("## Spark on a standalone cluster: the kip sink and source on 1 and 2 "
                   "workers (issue 25)")
# Spark's own Kafka connector (issue 43): format("kafka") from spark-sql-kafka-0-10's jars.
SPARK_SINK = "spark-sql-kafka sink"
SPARK_SOURCE = "spark-sql-kafka source"
PEER_WRITERS = (KIP, SPARK_SINK)
PEER_READERS = (SOURCE, SPARK_SOURCE)
ALL_WRITERS = WRITERS + (SPARK_SINK,)
ALL_READERS = READERS + (SPARK_SOURCE,)
GUARANTEES = {CONFLUENT: "at least once", KIP: "exactly once (read_committed)",
              ORDERED: "exactly once (every reader)", SPARK_SINK: "at least once",
              CONSUMER: "-", SOURCE: "-", SPARK_SOURCE: "-"}
# Issue 43's targets: each kip lane's rows/s over its spark-sql-kafka peer's.
TARGETS = {KIP: (SPARK_SINK, 2.0), SOURCE: (SPARK_SOURCE, 1.0)}
# The connector's producer settings (``kafka.`` options): the bench's Java producer lane's
# (side_by_side_producer.JAVA_PRODUCER_CONFIG: librdkafka's batch.size, linger.ms 5, acks
# all, idempotent), but its buffer.memory, Spark's producer being one per executor JVM.
SPARK_SINK_SKIPS = ("buffer.memory",)


def confluent_partition(bootstrap: str, topic: str):
    def write(rows) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "log_level": 3})
        for row in rows:
            while True:
                try:
                    p.produce(topic, row.value, row.key)
                    break
                except BufferError:
                    p.poll(0.01)
        left = p.flush(120)
        if left:
            raise RuntimeError(f"{left} records not delivered")

    return write


def confluent_read(spark, bootstrap: str, topic: str):
    """A DataFrame of the topic read by one confluent Consumer loop per Kafka partition."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                for p in range(PARTITIONS)})
    ends = {tp.partition: f.result(30).offset for tp, f in found.items()}

    def read(partitions):
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as TP

        for p in partitions:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip-bench-read",
                          "enable.auto.commit": False, "log_level": 3})
            c.assign([TP(topic, p, 0)])
            position = 0
            while position < ends[p]:
                for m in c.consume(10_000, 1.0):
                    if m.error() is None:
                        position = m.offset() + 1
                        yield (m.key(), m.value(), topic, p, m.offset())
            c.close()

    rdd = spark.sparkContext.parallelize(range(PARTITIONS), PARTITIONS).mapPartitions(read)
    return spark.createDataFrame(rdd, "key binary, value binary, topic string, "
                                      "partition int, offset long")


def count(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer reads (log end offsets would count the commit
    markers too)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip-bench-count",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "log_level": 3})
    c.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
    seen, at_end = 0, set()
    deadline = time.monotonic() + 120
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.2):
            if m.error() is None:
                seen += 1
            elif m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
    c.close()
    return seen


def spark_sink_options() -> dict[str, str]:
    """The spark-sql-kafka sink's producer settings, as ``kafka.`` options."""
    from side_by_side_producer import JAVA_PRODUCER_CONFIG

    return {f"kafka.{k}": v for k, v in JAVA_PRODUCER_CONFIG.items()
            if k not in SPARK_SINK_SKIPS}


def spark_kafka_jars() -> list[str]:
    """Spark's own Kafka connector's jars, fetched through Maven the first time."""
    return apache_kafka("spark_kafka_jars").jars()


def session_conf(lanes: tuple[str, ...]) -> dict[str, str]:
    """The bench's SparkSession settings; with a spark-sql-kafka lane, its jars too (one
    session for all the lanes)."""
    conf = {"spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "8"}
    if {SPARK_SINK, SPARK_SOURCE} & set(lanes):
        conf["spark.jars"] = ",".join(spark_kafka_jars())
    return conf


def write(name: str, df, bootstrap: str, topic: str) -> None:
    """``df`` to ``topic`` the way lane ``name`` writes."""
    from kipproducer import spark as kip_spark

    if name == CONFLUENT:
        df.foreachPartition(confluent_partition(bootstrap, topic))
    elif name == KIP:
        (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).mode("append").save())
    elif name == SPARK_SINK:
        (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .options(**spark_sink_options()).option("topic", topic).mode("append").save())
    else:
        kip_spark.write_ordered(df, topic, {"kafka.bootstrap.servers": bootstrap})


def reader(name: str, spark, bootstrap: str, topic: str):
    """A DataFrame of ``topic`` read the way lane ``name`` reads."""
    if name == CONSUMER:
        return confluent_read(spark, bootstrap, topic)
    source = "kafka" if name == SPARK_SOURCE else "kip"
    return (spark.read.format(source).option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


class Costs:
    """CPU seconds over one timed action: the Spark side (this process and every process
    under it but the brokers: the driver, its JVM, executors, Python workers; on a cluster the
    master and workers too) and the brokers."""

    def __init__(self, broker: BenchBroker) -> None:
        self.pids = broker.pids
        self.spark, self.broker = self.now()

    def now(self) -> tuple[float, float]:
        return tree_cpu(os.getpid(), self.pids), brokers_cpu(self.pids)

    def since(self) -> tuple[float, float]:
        spark, broker = self.now()
        return spark - self.spark, broker - self.broker


def measure(master: str, records: int, repeat: int, broker: BenchBroker,
            writers: tuple[str, ...] = WRITERS, readers: tuple[str, ...] = READERS,
            conf: dict[str, str] | None = None, executors: int = 0,
            cpu: dict[str, list[tuple[float, float]]] | None = None) -> dict[str, list[float]]:
    """Seconds per run of every contender of ``writers`` and ``readers`` on a new
    SparkSession of ``master`` (``conf`` added to its settings; on a cluster, after
    ``executors`` executors joined); each run's (Spark, broker) CPU seconds appended to
    ``cpu`` by name. The readers read the confluent writer's or the spark-sql-kafka sink's
    topic, or the first writer's when neither is measured."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer import spark as kip_spark

    bootstrap = broker.bootstrap
    spark = kip_spark.session(master, "kip-bench", {**session_conf(writers + readers),
                                                    **(conf or {})})
    tag = re.sub(r"[^A-Za-z0-9_-]+", "-", master).strip("-")  # a topic name's characters
    times: dict[str, list[float]] = {name: [] for name in writers + readers}
    try:
        wait_for_executors(spark, executors)
        df = rows(spark, records)
        df.count()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # Round 0 is a warm-up, not counted: each path's first action starts its Python
        # workers and imports (pyarrow, kipproducer), or loads the connector's classes, which
        # cost seconds once per session.
        for r in range(repeat + 1):
            read_topic = ""
            topics = []
            for name in writers:
                topic = f"{tag}-{name.split()[0]}-{name.split()[-1].strip('()')}-{r}"
                admin.create_topics([NewTopic(topic, PARTITIONS, broker.replication)]
                                    )[topic].result(30)
                topics.append(topic)
                # the confluent writer's or the connector's, else the first
                if not read_topic or name in (CONFLUENT, SPARK_SINK):
                    read_topic = topic
                costs = Costs(broker)
                started = time.perf_counter()
                write(name, df, bootstrap, topic)
                elapsed = time.perf_counter() - started
                spent = costs.since()
                written = count(bootstrap, topic)
                if written != records:
                    raise SystemExit(f"{name}: {written} records in {topic}, expected "
                                     f"{records}")
                report(master, r, name, records, elapsed, times, spent, cpu)
            for name in readers:
                costs = Costs(broker)
                started = time.perf_counter()
                read = reader(name, spark, bootstrap, read_topic)
                read.write.format("noop").mode("overwrite").save()
                elapsed = time.perf_counter() - started
                spent = costs.since()
                found = read.count()  # outside the timing
                if found != records:
                    raise SystemExit(f"{name}: read {found} rows of {read_topic}, expected "
                                     f"{records}")
                report(master, r, name, records, elapsed, times, spent, cpu)
            # Each round from the same memory: the broker's data dir is on tmpfs.
            delete_topics(bootstrap, *topics)
    finally:
        spark.stop()
    return times


def wait_for_executors(spark, count: int, timeout_s: float = 120) -> None:
    """On a cluster: the executors start after the session; a run timed before they are all
    there would measure fewer of them."""
    deadline = time.monotonic() + timeout_s
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"fewer than {count} executors after {timeout_s:.0f} s")
        time.sleep(0.2)


def measure_cluster(workers: int, records: int, repeat: int, broker: BenchBroker,
                    lanes: tuple[str, ...] = CLUSTER,
                    cpu: dict[str, list[tuple[float, float]]] | None = None
                    ) -> dict[str, list[float]]:
    """The ``lanes`` (by default the kip sink and the kip source), timed as ``measure``
    times them, on a Spark standalone cluster of ``workers`` workers of one core each
    (kipproducer.spark.standalone: each worker's executor its own JVM and Python workers, on
    this machine) started for the run and stopped after it."""
    import tempfile
    from pathlib import Path

    from kipproducer import spark as kip_spark
    from kipproducer.spark.standalone import Standalone

    work = Path(tempfile.mkdtemp(prefix=f"kip-bench-standalone-{workers}-"))
    try:
        with Standalone(work, workers=workers, cores=1, memory="2g",
                        java_home=kip_spark.find_java()) as cluster:
            return measure(cluster.url, records, repeat, broker,
                           writers=tuple(n for n in lanes if n in ALL_WRITERS),
                           readers=tuple(n for n in lanes if n in ALL_READERS),
                           executors=workers, cpu=cpu, conf={
                               "spark.executor.memory": "1g", "spark.executor.cores": "1",
                               "spark.pyspark.python": sys.executable})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cluster_section(args, results: dict[int, dict[str, list[float]]], where: str) -> str:
    import pyspark

    counts = sorted(results)
    lines = [CLUSTER_HEADING, "",
             f"{args.records:,} rows (12-byte keys, 100-byte values, 8 Spark partitions, cached "
             "on the executors) written by the kip sink (transactional) to a 6-partition topic "
             f"on one `kip broker` (data dir {where}), then read back by the kip source into a "
             "`noop` write, on a Spark standalone cluster of N workers of one core each "
             "(master, workers and their executors on this machine; the driver too); one "
             f"warm-up round, then {args.repeat} alternating runs each, median; "
             f"`python bench/side_by_side_spark.py --cluster-workers {args.cluster_workers} "
             f"--records {args.records} --repeat {args.repeat}`. pyspark "
             f"{pyspark.__version__}. Machine: {machine()}.", "",
             "| workers | " + " | ".join(f"{name} rows/s (median)" for name in CLUSTER)
             + " |", "|---|" + "---|" * len(CLUSTER)]
    for n in counts:
        lines.append(f"| {n} | " + " | ".join(
            f"{args.records / statistics.median(results[n][name]):,.0f}" for name in CLUSTER)
            + " |")
    median = {n: {name: statistics.median(results[n][name]) for name in CLUSTER}
              for n in counts}
    for n in counts[1:]:  # the scaling ratio: rows/s on n workers over rows/s on the fewest
        lines.append(f"| {n} over {counts[0]} | " + " | ".join(
            f"{median[counts[0]][name] / median[n][name]:.2f}x" for name in CLUSTER) + " |")
    lines.append("")
    return "\n".join(lines)


def load(bootstrap: str, topic: str, records: int) -> None:
    """The rows of the write benchmark (key-%08d, 100 bytes of one digit), round robin over
    the partitions, by one confluent Producer in this process (Spark's write paths cost
    minutes per million rows on a loaded 2-core machine, and are not what is measured)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "log_level": 3})
    values = [str(d).encode() * 100 for d in range(10)]
    for i in range(records):
        while True:
            try:
                p.produce(topic, values[i % 10], b"key-%08d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300):
        raise SystemExit("loading the topic: records not delivered")


def raw_reader(bootstrap: str, records: int, repeat: int) -> None:
    """The kip source's task code without Spark: fetch_read.read_range over every partition
    of a loaded topic in this process, wall time and this process's CPU time (the broker is
    another process), printed."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer.spark.fetch_read import read_range
    from kipproducer.spark.offset_range import OffsetRange

    topic = f"raw-{records}-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    load(bootstrap, topic, records)
    ends = [len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)]
    for r in range(repeat + 1):
        wall, cpu, rows = time.perf_counter(), time.process_time(), 0
        for p in range(PARTITIONS):
            for batch in read_range({"bootstrap.servers": bootstrap},
                                    OffsetRange(topic, p, 0, ends[p]),
                                    isolation="read_uncommitted", include_headers=False,
                                    fail_on_data_loss=True, poll_timeout_s=60):
                rows += batch.num_rows
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if rows != records:
            raise SystemExit(f"raw reader: {rows} rows, expected {records}")
        print(f"{'warm-up' if r == 0 else f'run {r}'} kip reader without Spark: "
              f"{rows / wall:,.0f} rows/s wall, {rows / cpu:,.0f} rows per CPU-second "
              f"({wall:.2f} s wall, {cpu:.2f} s CPU)", flush=True)


def arrow_ceiling(master: str, records: int, repeat: int) -> None:
    """What Spark itself costs on the kip source's path, with no Kafka at all: a Python data
    source of the source's schema whose tasks yield ready pyarrow RecordBatches (built once
    per task, outside nothing but Spark), read into a ``noop`` write as the readers table
    does. Its rows/s per core bounds any Kafka source written as a Python data source on this
    machine (printed)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kipproducer import spark as kip_spark
    from kipproducer.spark.source import SCHEMA

    class Share(InputPartition):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class MemoryReader(DataSourceReader):
        def partitions(self):
            return [Share(len(range(p, records, PARTITIONS))) for p in range(PARTITIONS)]

        def read(self, share):
            import datetime

            import pyarrow as pa

            size = 10_000
            stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
            batch = pa.RecordBatch.from_pydict({
                "key": pa.array([b"k%011d" % i for i in range(size)], pa.binary()),
                "value": pa.array([b"v" * 100] * size, pa.binary()),
                "topic": pa.array(["memory"] * size, pa.string()),
                "partition": pa.array([0] * size, pa.int32()),
                "offset": pa.array(range(size), pa.int64()),
                "timestamp": pa.array([stamp] * size, pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * size, pa.int32())})
            left = share.rows
            while left > 0:
                yield batch if left >= size else batch.slice(0, left)
                left -= size

    class Memory(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kip-bench-memory"

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema):
            return MemoryReader()

    spark = kip_spark.session(master, "kip-bench-ceiling", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false"})
    try:
        spark.dataSource.register(Memory)
        for r in range(repeat + 1):
            started = time.perf_counter()
            spark.read.format("kip-bench-memory").load().write.format("noop").mode(
                "overwrite").save()
            elapsed = time.perf_counter() - started
            cores = int(spark.sparkContext.defaultParallelism)
            print(f"{master} {'warm-up' if r == 0 else f'run {r}'} Arrow batches from memory "
                  f"(no Kafka): {records / elapsed:,.0f} rows/s, "
                  f"{records / elapsed / cores:,.0f} rows/s per core ({elapsed:.2f} s)",
                  flush=True)
    finally:
        spark.stop()


def rows(spark, records: int):
    """The bench's DataFrame: ``records`` rows (key-%08d, 100 bytes of one digit) in 8
    partitions, cached in memory (the caller's first action fills the cache)."""
    from pyspark.sql import functions as F

    return (spark.range(0, records, numPartitions=8)
            .select(F.format_string("key-%08d", "id").cast("binary").alias("key"),
                    F.expr("cast(repeat(cast(id % 10 as string), 100) as binary)")
                    .alias("value"))
            .cache())


def arrow_write_ceiling(master: str, records: int, repeat: int) -> None:
    """What Spark itself costs on the kip sink's path, with no Kafka at all: the bench's
    cached DataFrame written to a Python data source whose Arrow writer only counts the rows
    of the batches Spark hands it (the kip sink's writer is such a DataSourceArrowWriter). Its
    rows/s bounds any Kafka sink written as a Python data source on this machine (printed,
    with the CPU seconds of this process and every process under it)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    from kipproducer import spark as kip_spark

    class Counted(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class Dropping(DataSourceArrowWriter):
        def write(self, iterator):
            return Counted(sum(batch.num_rows for batch in iterator))

        def commit(self, messages) -> None:
            written = sum(m.rows for m in messages)
            if written != records:
                raise RuntimeError(f"the writers saw {written} rows, expected {records}")

    class Drop(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kip-bench-drop"

        def writer(self, schema, overwrite):
            return Dropping()

    spark = kip_spark.session(master, "kip-bench-write-ceiling", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false"})
    try:
        spark.dataSource.register(Drop)
        df = rows(spark, records)
        df.count()
        for r in range(repeat + 1):
            cpu = tree_cpu(os.getpid())
            started = time.perf_counter()
            df.write.format("kip-bench-drop").mode("append").save()
            elapsed = time.perf_counter() - started
            cpu = tree_cpu(os.getpid()) - cpu
            print(f"{master} {'warm-up' if r == 0 else f'run {r}'} Arrow batches to a Python "
                  f"writer that drops them (no Kafka): {records / elapsed:,.0f} rows/s "
                  f"({elapsed:.2f} s, {cpu * 1e6 / records:.2f} CPU s per 1M rows)", flush=True)
    finally:
        spark.stop()


def measure_readers(master: str, records: int, repeat: int,
                    bootstrap: str) -> dict[str, list[float]]:
    """Seconds per run of each reader of one topic of ``records`` rows (written once)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer import spark as kip_spark

    spark = kip_spark.session(master, "kip-bench", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8"})
    times: dict[str, list[float]] = {name: [] for name in READERS}
    try:
        topic = f"readers-{records}-{int(time.time())}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        started = time.perf_counter()
        load(bootstrap, topic, records)
        print(f"loaded {records:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        for r in range(repeat + 1):
            for name in READERS:
                if name == CONSUMER:
                    read = confluent_read(spark, bootstrap, topic)
                else:
                    read = (spark.read.format("kip")
                            .option("kafka.bootstrap.servers", bootstrap)
                            .option("subscribe", topic).load())
                started = time.perf_counter()
                read.write.format("noop").mode("overwrite").save()
                report(master, r, name, records, time.perf_counter() - started, times)
            if r == 0:  # the row count once, outside the timing
                for name in READERS:
                    read = (confluent_read(spark, bootstrap, topic) if name == CONSUMER else
                            spark.read.format("kip").option("kafka.bootstrap.servers",
                                                            bootstrap)
                            .option("subscribe", topic).load())
                    found = read.count()
                    if found != records:
                        raise SystemExit(f"{name}: read {found} rows, expected {records}")
    finally:
        spark.stop()
    return times


def readers_section(args, results: dict[str, dict[str, list[float]]], where: str) -> str:
    import pyarrow
    import pyspark

    lines = [READERS_HEADING, "",
             f"{args.records:,} rows (12-byte keys, 100-byte values) in a 6-partition topic on "
             f"one `kip broker` (data dir {where}), written once by a confluent Producer, "
             "then read into a DataFrame Spark materialises (a `noop` write), one task per Kafka "
             f"partition; one warm-up round, then {args.repeat} alternating runs each, median; "
             f"`python bench/side_by_side_spark.py --readers-only --records {args.records} "
             f"--repeat {args.repeat} --masters {args.masters}`. pyspark {pyspark.__version__}, "
             f"pyarrow {pyarrow.__version__}. Machine: {machine()}.", ""]
    for master, times in results.items():
        cores = re.match(r"local\[(\d+)", master)
        lines += [f"Spark `{master}`:", "",
                  "| reader | rows/s (median) | vs confluent | rows/s per core |",
                  "|---|---|---|---|"]
        base = statistics.median(times[CONSUMER])
        for name in READERS:
            median = statistics.median(times[name])
            per_core = (f"{args.records / median / int(cores.group(1)):,.0f}" if cores
                        else "-")
            lines.append(f"| {name} | {args.records / median:,.0f} | {base / median:.2f}x | "
                         f"{per_core} |")
        lines.append("")
    return "\n".join(lines)


def report(master: str, r: int, name: str, records: int, elapsed: float,
           times: dict[str, list[float]], spent: tuple[float, float] | None = None,
           cpu: dict[str, list[tuple[float, float]]] | None = None) -> None:
    """One run printed, and kept unless it is the warm-up (round 0); ``spent``: its (Spark,
    broker) CPU seconds, kept in ``cpu``."""
    used = (f", CPU s Spark {spent[0]:.2f} broker {spent[1]:.2f}" if spent is not None
            else "")
    if r == 0:
        print(f"{master} warm-up {name}: {elapsed:.2f} s{used}", flush=True)
        return
    times[name].append(elapsed)
    if cpu is not None and spent is not None:
        cpu.setdefault(name, []).append(spent)
    print(f"{master} run {r} {name}: {records / elapsed:,.0f} rows/s ({elapsed:.2f} s{used})",
          flush=True)


def peer_heading(choice: str, cluster: bool) -> str:
    nodes = BROKERS[choice]
    where = (f"Apache Kafka, {nodes} node{'s' if nodes > 1 else ''}" if nodes
             else "`kip broker`")
    return (f"## Spark on {where}{', standalone cluster' if cluster else ''}: "
            'format("kip") vs Spark\'s own Kafka connector (issue 43)')


def command_line(args) -> str:
    """The command that made a section, from its arguments."""
    words = ["python bench/side_by_side_spark.py", f"--broker {args.broker}",
             f"--records {args.records}", f"--repeat {args.repeat}"]
    words.append(f"--cluster-workers {args.cluster_workers}" if args.cluster_workers
                 else f"--masters {args.masters}")
    if args.contenders:
        words.append(f"--contenders '{args.contenders}'")
    return " ".join(words)


def peer_section(args, broker: BenchBroker, lanes: tuple[str, ...],
                 results: dict[str, dict[str, list[float]]],
                 cpu: dict[str, dict[str, list[tuple[float, float]]]],
                 loads: tuple[str, str]) -> str:
    """The lanes' table per master, with each kip lane's rows/s over its spark-sql-kafka
    peer's per round and issue 43's target."""
    import pyspark

    jars = apache_kafka("spark_kafka_jars")
    clients = next((Path(j).name for j in jars.jars() if "kafka-clients" in j), "?")
    writers = [n for n in lanes if n in ALL_WRITERS]
    readers = [n for n in lanes if n in ALL_READERS]
    read_from = next((n for n in (SPARK_SINK, CONFLUENT) if n in writers),
                     writers[0] if writers else "")
    lines = [peer_heading(args.broker, bool(args.cluster_workers)), "",
             f"Command: `{command_line(args)}` (one warm-up round, then {args.repeat} "
             f"round{'s' if args.repeat > 1 else ''} of every lane one after another, "
             "median).",
             f"Machine: {machine()}; Spark, the bench and {broker.words} share its cores, on "
             f"loopback; the broker's data dir {broker.data_where}. /proc/loadavg before: "
             f"{loads[0]}; after: {loads[1]}.",
             f"Versions: pyspark {pyspark.__version__}; spark-sql-kafka-0-10_2.13 "
             f"{jars.SPARK_KAFKA_VERSION} with {clients} ({jars.VERSION_NOTE}; "
             f"{jars.SPARK_KAFKA_VERSION} read and wrote every row here on pyspark "
             f"{pyspark.__version__}, counted after each run); {versions()}.",
             f"Workload: {args.records:,} rows (12-byte keys, 100-byte values) in 8 Spark "
             "partitions, cached in memory before the first run; every sink writes them to its "
             f"own fresh {PARTITIONS}-partition topic (replication factor {broker.replication}), "
             "timed from the action's start to its end (Spark's task scheduling included). "
             "The kip sink: `df.write.format(\"kip\")`, each task's rows in its own "
             "transaction, committed by the driver (two-phase), exactly once for read_committed "
             "readers. The spark-sql-kafka sink: `df.write.format(\"kafka\")` with "
             + ", ".join(f"{k}={v}" for k, v in spark_sink_options().items())
             + ", at least once (a retried task writes its rows again). "
             + (f"Every source reads the {read_from}'s topic into a `noop` write, one task "
                "per Kafka partition, timed from building the DataFrame to the write's end. "
                if readers else "")
             + "After every write a read_committed consumer counts the topic; after every "
             "read the DataFrame's `count()` does; a wrong count ends the bench. CPU is "
             "measured over each timed action: the Spark side is this process and every "
             "process under it except the brokers (the driver, the JVM running the tasks, "
             "Python workers; on a cluster the master, workers and executors too), the broker "
             "side every broker process.", ""]
    for master, times in results.items():
        lines += [f"Spark `{master}`:", "",
                  "| lane | rows/s (median) | delivery | Spark CPU s per 1M rows | "
                  "broker CPU s per 1M rows |", "|---|---:|---|---:|---:|"]
        for name in writers + readers:
            spent = cpu[master].get(name, [(0.0, 0.0)])
            per_million = 1e6 / args.records
            lines.append(
                f"| {name} | {args.records / statistics.median(times[name]):,.0f} | "
                f"{GUARANTEES[name]} | "
                f"{statistics.median(s for s, _ in spent) * per_million:.2f} | "
                f"{statistics.median(b for _, b in spent) * per_million:.2f} |")
        lines.append("")
        for name, (peer, target) in TARGETS.items():
            if name not in times or peer not in times:
                continue
            ratios = [p / k for k, p in zip(times[name], times[peer], strict=True)]
            median = statistics.median(ratios)
            lines.append(f"{name} / {peer}, rows/s per round: "
                         + ", ".join(f"{r:.2f}x" for r in ratios) + f"; median "
                         f"{median:.2f}x (issue 43's target {target:g}x: "
                         f"{'met' if median >= target else 'NOT met'}).")
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--masters", default="local[2]",
                        help="comma list of Spark masters, each measured on its own session "
                        "(local[1],local[2] for the scaling table)")
    parser.add_argument("--readers-only", action="store_true",
                        help="measure only the two readers of one topic (issue 25's table)")
    parser.add_argument("--raw-reader", action="store_true",
                        help="only the source's task code without Spark (printed)")
    parser.add_argument("--arrow-ceiling", action="store_true",
                        help="only Spark's own cost on the source's and the sink's paths: "
                        "ready Arrow batches from a Python data source, and the cached rows "
                        "to one that drops them, no Kafka (printed)")
    parser.add_argument("--cluster-workers", metavar="N,M",
                        help="the kip sink and source on a Spark standalone cluster of each "
                        "number of workers (1,2 for the scaling ratio) instead of --masters")
    parser.add_argument("--broker", choices=list(BROKERS), default="kip",
                        help="kip broker (default), or Apache Kafka with 1 or 3 KRaft nodes "
                        "(kafka1, kafka3; then the lanes are format(\"kip\") and Spark's own "
                        "Kafka connector)")
    parser.add_argument("--contenders", metavar="NAMES",
                        help="comma-separated lanes (default: issue 14's five on kip broker, "
                        f"the kip and spark-sql-kafka lanes on Apache Kafka); known: "
                        f"{', '.join(ALL_WRITERS + ALL_READERS)}")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args()
    # commas inside brackets (local[2,4]) belong to the master
    masters = re.findall(r"[^,\[]+(?:\[[^\]]*\])?", args.masters)
    on_kafka = BROKERS[args.broker] > 0
    lanes = ((PEER_WRITERS + PEER_READERS) if on_kafka else WRITERS + READERS)
    if args.contenders:
        lanes = tuple(name.strip() for name in args.contenders.split(","))
        unknown = set(lanes) - set(ALL_WRITERS + ALL_READERS)
        if unknown:
            parser.error(f"unknown contenders {sorted(unknown)}; known: "
                         f"{list(ALL_WRITERS + ALL_READERS)}")
    peer = bool({SPARK_SINK, SPARK_SOURCE} & set(lanes))
    if set(lanes) & set(ALL_READERS) and not set(lanes) & set(ALL_WRITERS):
        parser.error("--contenders: the readers read what a writer wrote; name a writer too")
    if on_kafka and (args.readers_only or args.raw_reader or args.arrow_ceiling):
        parser.error("--readers-only, --raw-reader and --arrow-ceiling run on --broker kip")
    if not peer and (args.contenders or on_kafka):
        parser.error("--contenders and --broker kafka1/kafka3 take a spark-sql-kafka lane "
                     "(the other tables are issue 14's and 25's on kip broker)")

    if src_is_built():  # this checkout, built in place; else the installed package
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "src"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if peer:
        spark_kafka_jars()  # fetched (once) before the broker starts
    load0 = load_average()
    broker = start_broker(args.broker, "kip-bench-spark-")
    bootstrap, where = broker.bootstrap, broker.data_where
    results: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[tuple[float, float]]]] = {}
    try:
        if args.raw_reader:
            raw_reader(bootstrap, args.records, args.repeat)
            return
        if args.arrow_ceiling:
            for master in masters:
                arrow_ceiling(master, args.records, args.repeat)
                arrow_write_ceiling(master, args.records, args.repeat)
            return
        if args.cluster_workers and not peer:
            scaling = {n: measure_cluster(n, args.records, args.repeat, broker)
                       for n in sorted({int(n) for n in args.cluster_workers.split(",")})}
            section = cluster_section(args, scaling, where)
            print(section)
            if args.write:
                replace_section(args.write, CLUSTER_HEADING, section)
            return
        if args.cluster_workers:
            for n in sorted({int(n) for n in args.cluster_workers.split(",")}):
                name = f"standalone, {n} worker{'s' if n > 1 else ''} of one core"
                cpu[name] = {}
                results[name] = measure_cluster(n, args.records, args.repeat, broker, lanes,
                                                cpu[name])
        for master in masters if not args.cluster_workers else ():
            if args.readers_only:
                results[master] = measure_readers(master, args.records, args.repeat,
                                                  bootstrap)
                continue
            cpu[master] = {}
            results[master] = measure(
                master, args.records, args.repeat, broker,
                writers=tuple(n for n in lanes if n in ALL_WRITERS),
                readers=tuple(n for n in lanes if n in ALL_READERS), cpu=cpu[master])
    finally:
        broker.stop()

    if peer:
        section = peer_section(args, broker, lanes, results, cpu, (load0, load_average()))
        print(section)
        if args.write:
            replace_section(args.write, peer_heading(args.broker, bool(args.cluster_workers)),
                            section)
        return
    if args.readers_only:
        section = readers_section(args, results, where)
        print(section)
        if args.write:
            replace_section(args.write, READERS_HEADING, section)
        return
    lines = [HEADING, "",
             f"{args.records:,} rows (12-byte keys, 100-byte values, 8 Spark partitions, cached) "
             f"to a 6-partition topic on one `kip broker` (data dir {where}), then read back; "
             "one warm-up round, then "
             f"{args.repeat} alternating runs each, median; `python bench/side_by_side_spark.py "
             f"--records {args.records} --repeat {args.repeat} --masters {args.masters}`. "
             f"Machine: {machine()}.", ""]
    for master, times in results.items():
        lines += [f"Spark `{master}`:", "",
                  "| contender | rows/s (median) | vs confluent | guarantee |",
                  "|---|---|---|---|"]
        for names, base_name in ((WRITERS, CONFLUENT), (READERS, CONSUMER)):
            base = statistics.median(times[base_name])
            for name in names:
                median = statistics.median(times[name])
                lines.append(f"| {name} | {args.records / median:,.0f} | "
                             f"{base / median:.2f}x | {GUARANTEES[name]} |")
        lines.append("")
    if len(results) > 1:
        first, *rest = results
        lines += [f"Scaling: rows/s on each master over `{first}`:", "",
                  "| contender | " + " | ".join(f"`{m}`" for m in rest) + " |",
                  "|---|" + "---|" * len(rest)]
        for name in WRITERS + READERS:
            one = statistics.median(results[first][name])
            lines.append(f"| {name} | " + " | ".join(
                f"{one / statistics.median(results[m][name]):.2f}x" for m in rest) + " |")
        lines.append("")
    section = "\n".join(lines)
    print(section)
    if args.write:
        replace_section(args.write, HEADING, section)


if __name__ == "__main__":
    main()
