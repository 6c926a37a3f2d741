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

Usage: python bench/side_by_side_spark.py [--records N] [--repeat R]
       [--masters local[2] | --cluster-workers 1,2] [--readers-only | --raw-reader]
       [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time

from bench_support import broker_data_dir, start_kip_broker
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


def measure(master: str, records: int, repeat: int, bootstrap: str,
            writers: tuple[str, ...] = WRITERS, readers: tuple[str, ...] = READERS,
            conf: dict[str, str] | None = None,
            executors: int = 0) -> dict[str, list[float]]:
    """Seconds per run of every contender of ``writers`` and ``readers`` on a new
    SparkSession of ``master`` (``conf`` added to its settings; on a cluster, after
    ``executors`` executors joined). The readers read the confluent writer's topic, or the
    last writer's when it is not measured."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F

    from kipproducer import spark as kip_spark

    spark = kip_spark.session(master, "kip-bench", {
        "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8", **(conf or {})})
    tag = re.sub(r"[^A-Za-z0-9_-]+", "-", master).strip("-")  # a topic name's characters
    times: dict[str, list[float]] = {name: [] for name in writers + readers}
    try:
        wait_for_executors(spark, executors)
        df = (spark.range(0, records, numPartitions=8)
              .select(F.format_string("key-%08d", "id").cast("binary").alias("key"),
                      F.expr("cast(repeat(cast(id % 10 as string), 100) as binary)")
                      .alias("value"))
              .cache())
        df.count()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # Round 0 is a warm-up, not counted: each path's first action starts its Python
        # workers and imports (pyarrow, kipproducer), which cost seconds once per session.
        for r in range(repeat + 1):
            read_topic = ""
            for name in writers:
                topic = f"{tag}-{name.split()[0]}-{name.split()[-1].strip('()')}-{r}"
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                started = time.perf_counter()
                if not read_topic or name == CONFLUENT:  # the confluent writer's, else the first
                    read_topic = topic
                if name == CONFLUENT:
                    df.foreachPartition(confluent_partition(bootstrap, topic))
                elif name == KIP:
                    (df.write.format("kip").option("kafka.bootstrap.servers", bootstrap)
                     .option("topic", topic).mode("append").save())
                else:
                    kip_spark.write_ordered(df, topic, {"kafka.bootstrap.servers": bootstrap})
                elapsed = time.perf_counter() - started
                written = count(bootstrap, topic)
                if written != records:
                    raise SystemExit(f"{name}: {written} records in {topic}, expected "
                                     f"{records}")
                report(master, r, name, records, elapsed, times)
            for name in readers:
                started = time.perf_counter()
                if name == CONSUMER:
                    read = confluent_read(spark, bootstrap, read_topic)
                else:
                    read = (spark.read.format("kip").option("kafka.bootstrap.servers",
                                                            bootstrap)
                            .option("subscribe", read_topic).load())
                read.write.format("noop").mode("overwrite").save()
                report(master, r, name, records, time.perf_counter() - started, times)
            # the row count once per round, outside the timing
            if read.count() != records:
                raise SystemExit(f"{name}: read {read.count()} rows, expected {records}")
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


def measure_cluster(workers: int, records: int, repeat: int,
                    bootstrap: str) -> dict[str, list[float]]:
    """The kip sink and the kip source, timed as ``measure`` times them, on a Spark
    standalone cluster of ``workers`` workers of one core each (kipproducer.spark.standalone:
    each worker's executor its own JVM and Python workers, on this machine) started for the
    run and stopped after it."""
    import tempfile
    from pathlib import Path

    from kipproducer import spark as kip_spark
    from kipproducer.spark.standalone import Standalone

    work = Path(tempfile.mkdtemp(prefix=f"kip-bench-standalone-{workers}-"))
    try:
        with Standalone(work, workers=workers, cores=1, memory="2g",
                        java_home=kip_spark.find_java()) as cluster:
            return measure(cluster.url, records, repeat, bootstrap, writers=(KIP,),
                           readers=(SOURCE,), executors=workers, conf={
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
           times: dict[str, list[float]]) -> None:
    if r == 0:
        print(f"{master} warm-up {name}: {elapsed:.2f} s", flush=True)
        return
    times[name].append(elapsed)
    print(f"{master} run {r} {name}: {records / elapsed:,.0f} rows/s ({elapsed:.2f} s)",
          flush=True)


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
                        help="only Spark's own cost on the source's path: ready Arrow batches "
                        "from a Python data source, no Kafka (printed)")
    parser.add_argument("--cluster-workers", metavar="N,M",
                        help="the kip sink and source on a Spark standalone cluster of each "
                        "number of workers (1,2 for the scaling ratio) instead of --masters")
    parser.add_argument("--write", metavar="RESULTS_MD")
    args = parser.parse_args()
    # commas inside brackets (local[2,4]) belong to the master
    masters = re.findall(r"[^,\[]+(?:\[[^\]]*\])?", args.masters)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "src"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    data_dir, where = broker_data_dir("kip-bench-spark-")
    broker, bootstrap = start_kip_broker(data_dir)
    results: dict[str, dict[str, list[float]]] = {}
    try:
        if args.raw_reader:
            raw_reader(bootstrap, args.records, args.repeat)
            return
        if args.arrow_ceiling:
            for master in masters:
                arrow_ceiling(master, args.records, args.repeat)
            return
        if args.cluster_workers:
            scaling = {n: measure_cluster(n, args.records, args.repeat, bootstrap)
                       for n in sorted({int(n) for n in args.cluster_workers.split(",")})}
            section = cluster_section(args, scaling, where)
            print(section)
            if args.write:
                replace_section(args.write, CLUSTER_HEADING, section)
            return
        for master in masters:
            run = measure_readers if args.readers_only else measure
            results[master] = run(master, args.records, args.repeat, bootstrap)
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)

    if args.readers_only:
        section = readers_section(args, results, where)
        print(section)
        if args.write:
            replace_section(args.write, READERS_HEADING, section)
        return
    guarantees = {CONFLUENT: "at least once", KIP: "exactly once (read_committed)",
                  ORDERED: "exactly once (every reader)", CONSUMER: "-",
                  SOURCE: "-"}
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
                             f"{base / median:.2f}x | {guarantees[name]} |")
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
