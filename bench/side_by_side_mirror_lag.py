"""Live lag: kip mirror vs MirrorMaker 2 copying a topic while it is written (issue 43).

bench/side_by_side_mirror.py times copies of a topic written beforehand; this one measures
what a running mirror adds to each record's way. Two clusters (``--broker kafka1`` or
``kafka3``: two Apache Kafka clusters of 1 or 3 KRaft nodes, MirrorMaker 2 a lane; on 3 nodes
every topic has replication factor 3 and min.insync.replicas 2, MirrorMaker 2's internal ones
too; ``kip``: two `kip broker`s, the kip lanes only).
Per round and lane, a fresh 3-partition source topic; the lane is started and copies it
continuously (kip mirror in a process of its own, ``Mirror(...).run()`` until stopped;
MirrorMaker 2 as bench/mirror_on_kafka.py starts it: dedicated mode, exactly once,
``IdentityReplicationPolicy``, read_committed source); once a warm-up record per partition is
readable on the target, a producer writes ``--rate`` records/s for ``--seconds`` (acks=all,
each value carries its sequence number and the wall clock at its produce() call) while a
read_committed reader on the target takes each record's lag: its arrival minus that clock.
Reported per lane: the median, 99th percentile and largest lag, and the lag of the last source
record (when the writing stops, how long until the target has all of it), and the lane's CPU
over the written part; every run checks that each record arrived exactly once.

Usage: python bench/side_by_side_mirror_lag.py [--broker kip|kafka1|kafka3] [--rate N]
[--seconds S] [--repeat R] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

from bench_support import (
    BROKERS,
    BenchBroker,
    broker_cpu,
    child_env,
    node_count,
    start_broker,
    stop_on_sigterm,
)
from side_by_side_mirror import MM2, PARTITIONS, PRESERVE, TRANSACTIONAL, cpu_seconds

# The same with --commit-interval-ms 100 (the default, 1000, is for throughput): a record is
# readable once its transaction commits
TRANSACTIONAL_FAST = "kip mirror transactional, 100 ms commits"
COMMIT_INTERVAL_MS = {TRANSACTIONAL: 1000, TRANSACTIONAL_FAST: 100}
WARM_UP_S = 180.0   # the lane's start (a JVM and its connectors for MirrorMaker 2)
DRAIN_S = 180.0     # after the writing stops, for the last record to arrive
VALUE = struct.Struct(">qq")  # sequence number, produce() wall clock in ns; padded to 100 B
PAD = bytes(100 - VALUE.size)


def heading(choice: str) -> str:
    nodes = BROKERS[choice]
    where = f"Apache Kafka, {node_count(nodes)} per cluster" if nodes else "kip broker"
    return f"## Mirror live lag on {where}: kip mirror vs MirrorMaker 2 (issue 43)"


def run_kip_lane(lane: str, source: str, target: str, topic: str, out: str,
                 stop_file: str) -> None:
    """The child process of a kip lane: copy until ``stop_file`` exists, then print the
    CPU seconds it took from its ``.go`` file's appearance (the written part) as JSON."""
    from kipproducer.mirror import Mirror

    mode = "preserve" if lane == PRESERVE else "transactional"
    mirror = Mirror(source, target, topic, mode=mode, group=f"bench-{out}",
                    rename=out + ".{topic}", progress=False,
                    commit_interval_ms=COMMIT_INTERVAL_MS.get(lane, 1000))
    worker = threading.Thread(target=mirror.run, daemon=True)
    worker.start()
    c0 = None
    while not os.path.exists(stop_file):
        if c0 is None and os.path.exists(stop_file + ".go"):
            c0 = cpu_seconds()
        if not worker.is_alive():
            raise SystemExit(f"{lane}: the mirror stopped on its own")
        time.sleep(0.05)
    used = cpu_seconds() - (c0 if c0 is not None else cpu_seconds())
    mirror.stop()
    worker.join(60)
    print(json.dumps({"cpu": used}))


class Reader(threading.Thread):
    """Reads the target topic (read_committed) and keeps each record's lag and sequence."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.lags_ns: list[int] = []
        self.seen: dict[int, int] = {}   # sequence -> times read
        self.last_arrival_ns: dict[int, int] = {}
        # distinct sequences >= 0 read: counted here, since another thread iterating seen
        # while this one adds to it fails ("dictionary changed size during iteration")
        self.distinct = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-lag",
                             "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.wait.max.ms": 10, "log_level": 0})
        try:
            while self.topic not in consumer.list_topics(timeout=5).topics:
                if self.stopping.wait(0.2):
                    return
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
            while not self.stopping.is_set():
                for m in consumer.consume(10_000, 0.05):
                    if m.error():
                        continue
                    now = time.time_ns()
                    seq, sent = VALUE.unpack_from(m.value())
                    times = self.seen.get(seq, 0)
                    self.seen[seq] = times + 1
                    if seq >= 0 and times == 0:
                        self.distinct += 1
                    self.last_arrival_ns[seq] = now
                    if seq >= 0:
                        self.lags_ns.append(now - sent)
        except BaseException as exc:  # noqa: BLE001 - reported by the bench
            self.error = exc
        finally:
            consumer.close()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.02)


def run_lane(lane: str, source: BenchBroker, target: BenchBroker, rnd: int, rate: int,
             seconds: float, work: str) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from mirror_on_kafka import delete_topic, start_mm2, stop_mm2

    tag = {TRANSACTIONAL: "txn", TRANSACTIONAL_FAST: "txn100", PRESERVE: "preserve",
           MM2: "mm2"}[lane]
    topic = f"lag-{rnd}-{tag}"
    admin = AdminClient({"bootstrap.servers": source.bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, PARTITIONS, source.replication)])[topic].result(30)
    out = f"copy-{rnd}-{tag}"
    copied_to = topic if lane == MM2 else f"{out}.{topic}"
    stop_file = os.path.join(work, f"{out}.stop")
    if lane == MM2:
        proc, log_path = start_mm2(source, target, topic, work, f"lag{rnd}")
    else:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--one", lane, source.bootstrap, target.bootstrap,
             topic, out, stop_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=child_env())
    reader = Reader(target.bootstrap, copied_to)
    reader.start()
    producer = Producer({"bootstrap.servers": source.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "log_level": 4})
    n = int(rate * seconds)
    try:
        for p in range(PARTITIONS):  # warm-up: one record each, sequence -1 - p
            producer.produce(topic, VALUE.pack(-1 - p, time.time_ns()) + PAD, partition=p)
        producer.flush(30)
        wait_for(lambda: len(reader.seen) >= PARTITIONS or reader.error is not None,
                 WARM_UP_S, f"{lane}: the warm-up records")
        cpu0 = broker_cpu(proc.pid) if lane == MM2 else 0.0
        open(stop_file + ".go", "w").close()
        start = time.perf_counter()
        step = max(1, rate // 100)  # a chunk every 10 ms
        for first in range(0, n, step):
            due = start + first / rate
            while (ahead := due - time.perf_counter()) > 0:
                time.sleep(ahead)
            for seq in range(first, min(first + step, n)):
                while True:
                    try:
                        producer.produce(topic, VALUE.pack(seq, time.time_ns()) + PAD,
                                         partition=seq % PARTITIONS)
                        break
                    except BufferError:
                        producer.poll(0.001)
            producer.poll(0)
        last_sent_ns = time.time_ns()
        if producer.flush(60):
            raise RuntimeError("the source producer did not deliver everything")
        written_s = time.perf_counter() - start
        wait_for(lambda: n - 1 in reader.last_arrival_ns and reader.distinct >= n
                 or reader.error is not None,
            DRAIN_S, f"{lane}: the last records")
        if lane == MM2:
            cpu = broker_cpu(proc.pid) - cpu0
    finally:
        open(stop_file, "w").close()
        reader.stopping.set()
        reader.join(30)
        if lane == MM2:
            stop_mm2(proc)
        else:
            got, errors = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"{lane} failed:\n{errors[-3000:]}")
            cpu = json.loads(got.strip().splitlines()[-1])["cpu"]
    if reader.error is not None:
        raise RuntimeError(f"{lane}: the reader failed: {reader.error!r}")
    counts = [reader.seen.get(seq, 0) for seq in range(n)]
    if min(counts) != 1 or max(counts) != 1:
        raise RuntimeError(f"{lane}: {counts.count(0)} records missing, "
                           f"{sum(c > 1 for c in counts)} read more than once")
    delete_topic(source.bootstrap, topic)
    delete_topic(target.bootstrap, copied_to)
    lags = sorted(reader.lags_ns)
    return {"p50": lags[len(lags) // 2] / 1e6, "p99": lags[int(len(lags) * 0.99)] / 1e6,
            "max": lags[-1] / 1e6,
            "last": (max(reader.last_arrival_ns.values()) - last_sent_ns) / 1e6,
            "cpu": cpu, "records": n, "written_s": written_s}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", choices=list(BROKERS), default="kafka1",
                    help="two Apache Kafka clusters of 1 (kafka1, the default) or 3 KRaft "
                         "nodes (kafka3), or two `kip broker`s (kip: the kip lanes only)")
    ap.add_argument("--rate", type=int, default=10_000, help="source records per second")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the source is written")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", metavar="PATH")
    ap.add_argument("--one", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        run_kip_lane(*args.one)
        return
    stop_on_sigterm()  # (MirrorMaker 2's JVM too)
    lanes = [TRANSACTIONAL, TRANSACTIONAL_FAST, PRESERVE] + ([MM2] if BROKERS[args.broker]
                                                             else [])
    results: dict[str, list[dict]] = {lane: [] for lane in lanes}
    brokers: list[BenchBroker] = []
    t_run = time.perf_counter()
    try:
        for _ in range(2):
            brokers.append(start_broker(args.broker, "kip-bench-lag-"))
        source, target = brokers
        with tempfile.TemporaryDirectory(prefix="kip-bench-lag-") as work:
            for rnd in range(args.repeat):
                for lane in lanes:
                    r = run_lane(lane, source, target, rnd, args.rate, args.seconds, work)
                    results[lane].append(r)
                    print(f"{lane:42s} lag p50 {r['p50']:8.1f} ms p99 {r['p99']:8.1f} ms "
                          f"max {r['max']:8.1f} ms last {r['last']:8.1f} ms "
                          f"cpu {r['cpu']:.2f} s", file=sys.stderr)
    finally:
        for broker in brokers:
            broker.stop()
    section = report(args, lanes, results, time.perf_counter() - t_run, brokers[0])
    print(section)
    if args.write:
        from results_file import replace_section

        replace_section(args.write, heading(args.broker), section)


def report(args, lanes: list[str], results: dict[str, list[dict]], took: float,
           broker: BenchBroker) -> str:
    from bench_support import load_average, versions
    from results_file import machine

    def med(lane: str, key: str) -> float:
        return statistics.median(r[key] for r in results[lane])

    n = int(args.rate * args.seconds)
    command = (f"python bench/side_by_side_mirror_lag.py --broker {args.broker} --rate "
               f"{args.rate} --seconds {args.seconds:g} --repeat {args.repeat}")
    lines = [
        heading(args.broker), "",
        f"Command: `{command}` (median of {args.repeat} rounds, lanes alternating; whole run "
        f"{took:.0f} s). Machine: {machine()}, /proc/loadavg after: {load_average()}. "
        f"Versions: {versions()}.",
        f"Brokers: two clusters, each {broker.words}; data {broker.data_where}.", "",
        f"Workload: a fresh 3-partition source topic per run, written at {args.rate:,} "
        f"records/s for {args.seconds:g} s ({n:,} records of 100 bytes; acks=all, "
        "idempotent, linger.ms=5) while the lane copies it; lag = a record's arrival at a "
        "read_committed reader of the target minus the wall clock at its produce() call; "
        "last = when the writing stopped, how long until the target held all of it. kip "
        "lanes: `Mirror(...).run()` in a process of their own (transactional: "
        "read_committed source, a transaction committed every `--commit-interval-ms`, 1000 "
        "by default, or 100; preserve: offsets kept, "
        "through the stock target's emulated KIP-391 on Apache Kafka). MirrorMaker 2: "
        "dedicated mode, exactly once, as in the section above. Every run checks that each "
        "record arrived exactly once. CPU: the lane's process over the written part.", "",
        "| lane | lag p50, ms | lag p99, ms | largest, ms | last record, ms | CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for lane in lanes:
        lines.append(f"| {lane} | {med(lane, 'p50'):,.0f} | {med(lane, 'p99'):,.0f} | "
                     f"{med(lane, 'max'):,.0f} | {med(lane, 'last'):,.0f} | "
                     f"{med(lane, 'cpu'):.2f} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
