"""Side-by-side on a stock broker (the stand-in for stock Kafka, `kip broker --config
kip.extensions.enable=false`, or Apache Kafka itself: ``--broker``): an emulated offset copy
(produce_arrays(offsets=...) through Kafka's transactions, docs/stock-clusters.md) against
confluent-kafka's plain produce() of the same records, and conditional appends of batches of
1, 100 and 10,000 records, emulated on the stock broker and native on a `kip broker` with the
extension.

The records are side_by_side_copy.py's workload (12-byte keys, 100-byte values, offsets with
random gaps of 1..100 at the given gap rates). One run per contender and rate, each in its own
process, sequentially, to its own fresh topic; timed from the first call to flush() returning.
Transactions: the gap transactions the emulation wrote (an empty aborted one for a gap of one
offset, fillers and an abort for a longer one; partitions whose gaps are ready together share
one), and per second of the run.

With ``--partitions N`` the N records are spread over N partitions of each topic (N / P each,
the emulated copy calling produce_arrays per partition in chunks, round-robin); partition 0
has the one-partition run's offsets, every other partition its own random gaps at the same
rate (a seed per partition), so gaps line up only by chance.

``--broker`` picks where the emulated lanes (and confluent's produce()) run: ``standin`` (the
stand-in above, the default), or real Apache Kafka with 1 or 3 KRaft nodes (``kafka1``,
``kafka3``; the jars the tests cache, tests/apache_kafka; issue 43; on 3 nodes the topics have
replication factor 3, min.insync.replicas 2, acks=all as everywhere here). The native
conditional lanes stay on a `kip broker` with the extension. With ``--write`` the report
goes to a section of its own per Apache Kafka node count (the stand-in's section in
bench/RESULTS.md gathers several runs by hand, so ``--write`` refuses ``standin``).

    python bench/side_by_side_stock.py [--records N] [--gap-rate F[,F...]] [--partitions N]
        [--conditional-records N] [--no-conditional] [--broker standin|kafka1|kafka3]
        [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time

from bench_support import (
    BROKERS,
    BenchBroker,
    broker_data_dir,
    child_env,
    create_topics,
    node_count,
    start_broker,
    start_kip_broker,
    start_kip_broker_with,
    stop_on_sigterm,
    versions,
)
from side_by_side_copy import workload

CHUNK = 100_000
# --broker: the stand-in (`kip broker` without its extensions), or Apache Kafka of 1 or 3 nodes
STOCK_BROKERS = ["standin", *(name for name, nodes in BROKERS.items() if nodes)]


def heading(choice: str) -> str:
    """The section ``--write`` replaces: one per Apache Kafka node count."""
    nodes = BROKERS[choice]
    return (f"## Stock clusters on Apache Kafka, {node_count(nodes)}: "
            "emulated KIP-391 copy and KIP-27 appends (issue 43)")


def partition_offsets(n: int, rate: float, partition: int, base):
    """Partition ``partition``'s offsets: partition 0 takes ``base`` (the workload's), the others
    their own gaps at the same rate."""
    import numpy as np
    from side_by_side_copy import MAX_GAP, SEED

    if partition == 0:
        return base[:n]
    rng = np.random.default_rng(SEED + partition)
    steps = np.where(rng.random(n) < rate, rng.integers(2, MAX_GAP + 2, n), 1)
    steps[0] = 0
    return np.cumsum(steps, dtype=np.int64)


def create_partitioned(bootstrap: str, topic: str, partitions: int,
                       replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)


def start_stock(choice: str) -> BenchBroker:
    """The broker of the emulated lanes: the stand-in, or an Apache Kafka cluster."""
    if choice != "standin":
        return start_broker(choice, "kip-bench-stock-")
    data, where = broker_data_dir("kip-bench-stock-")
    try:
        proc, listeners = start_kip_broker_with(data, {"kip.extensions.enable": "false"})
    except BaseException:
        shutil.rmtree(data, ignore_errors=True)
        raise

    def stop() -> None:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)

    return BenchBroker(choice, listeners, [proc.pid], stop,
                       "the stand-in (`kip broker --config kip.extensions.enable=false`)",
                       where)


def run_copy(name: str, bootstrap: str, topic: str, n: int, rate: float,
             partitions: int = 1) -> dict:
    import numpy as np
    from confluent_kafka import Producer as CkProducer

    from kipproducer import Producer
    from kipproducer.stock.plan import Step, plan_runs

    keys, values, offsets = workload(n, rate)
    each = n // partitions
    per_partition = [partition_offsets(each, rate, p, offsets) for p in range(partitions)]
    config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
              "linger.ms": 5, "queue.buffering.max.messages": 2_000_000,
              "queue.buffering.max.kbytes": 2_097_151}
    txns = 0
    if name == "confluent":
        producer = CkProducer(config)
    else:
        producer = Producer({**config, "kip.mode": "emulated",
                             "kip.emulation.transactional.id": f"bench-{topic}"})
        producer.kip_mode(topic)  # the probe, untimed
        # one transaction per gap, unless the emulation counts fewer (shared ones)
        txns = sum(a.step != Step.PLAIN for offs in per_partition for a in plan_runs(0, offs))
    t0 = time.perf_counter()
    if name == "confluent":
        for i in range(each * partitions):
            while True:
                try:
                    producer.produce(topic, values[i], keys[i], partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 10000 == 0:
                producer.poll(0)
    else:
        key_col, value_col = np.array(keys, dtype=object), np.array(values, dtype=object)
        for start in range(0, each, CHUNK):
            for p in range(partitions):
                first = p * each + start
                stop = min(start + CHUNK, each) - start + first
                producer.produce_arrays(topic, value_col[first:stop], keys=key_col[first:stop],
                                        partition=p,
                                        offsets=per_partition[p][start:start + CHUNK])
    left = producer.flush(600)
    seconds = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{name}: {left} records not delivered")
    if name != "confluent":
        from kipproducer.producer import emulation_of

        txns = getattr(emulation_of(producer), "gap_transactions", txns)
    return {"seconds": seconds, "txns": txns, "records": each * partitions}


def run_conditional(bootstrap: str, topic: str, n: int, size: int, mode: str) -> dict:
    from kipproducer import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "kip.mode": mode, "linger.ms": 0})
    producer.kip_mode(topic)
    values = [b"v" * 100] * size
    expected, done = 0, 0
    t0 = time.perf_counter()
    while done < n:
        first = producer.append(topic, values, partition=0, expected_offset=expected)
        # emulated: the commit marker takes one offset; native: no marker
        expected = first + size + (1 if mode == "emulated" else 0)
        done += size
    return {"seconds": time.perf_counter() - t0, "records": done}


def child(args) -> None:
    if args.child == "conditional":
        out = run_conditional(args.bootstrap, args.topic, args.records, args.size, args.mode)
    else:
        out = run_copy(args.child, args.bootstrap, args.topic, args.records,
                       float(args.gap_rate), args.partitions)
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--gap-rate", default="0,0.0001,0.01,0.1")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--conditional-records", type=int, default=20_000)
    ap.add_argument("--no-conditional", action="store_true")
    ap.add_argument("--broker", choices=STOCK_BROKERS, default="standin",
                    help="where the emulated lanes run: the stand-in (default), or Apache "
                         "Kafka with 1 or 3 KRaft nodes (kafka1, kafka3)")
    ap.add_argument("--write", metavar="PATH",
                    help="replace this run's section of a results file (Apache Kafka only)")
    ap.add_argument("--child")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--size", type=int, default=1)
    ap.add_argument("--mode", default="emulated")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.write and args.broker == "standin":
        ap.error("--write: the stand-in's section of bench/RESULTS.md is put together by hand "
                 "from several runs; --write takes --broker kafka1 or kafka3")
    stop_on_sigterm()
    load0 = load()
    out: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        out.append(text)

    stock = start_stock(args.broker)
    try:
        bootstrap = stock.bootstrap
        say(f"Emulated lanes on {stock.words}, its data {stock.data_where}; /proc/loadavg "
            f"before: {load0}")

        def spawn(kind: str, topic: str, *extra: str) -> dict:
            create_partitioned(bootstrap, topic, args.partitions, stock.replication)
            done = subprocess.run([sys.executable, __file__, "--child", kind, "--bootstrap",
                                   bootstrap, "--topic", topic, *extra],
                                  capture_output=True, text=True, env=child_env(), check=True)
            return json.loads(done.stdout.strip().splitlines()[-1])

        n, parts = args.records, ["--partitions", str(args.partitions)]
        base = spawn("confluent", "c-0", "--records", str(n), "--gap-rate", "0", *parts)
        rate_c = base["records"] / base["seconds"]
        say(f"{args.partitions} partition(s)\n\n"
            f"| contender | gap rate | records/s | vs confluent | transactions | "
            f"transactions/s |\n|---|---|---|---|---|---|\n"
            f"| confluent produce() | - | {rate_c:,.0f} | 1.00x | 0 | - |")
        for i, rate in enumerate(float(r) for r in args.gap_rate.split(",")):
            got = spawn("emulated", f"e-{i}", "--records", str(n), "--gap-rate",
                        str(rate), *parts)
            r = got["records"] / got["seconds"]
            say(f"| emulated produce_arrays(offsets=) | {rate:g} | {r:,.0f} | "
                f"{r / rate_c:.2f}x | {got['txns']:,} | "
                f"{got['txns'] / got['seconds']:,.0f} |")
        if not args.no_conditional:
            conditional(args, stock, say)
    finally:
        stock.stop()
    say(f"\n/proc/loadavg after: {load()}")
    if args.write:
        from results_file import machine, replace_section

        flags = (f"--records {args.records} --gap-rate {args.gap_rate} --partitions "
                 f"{args.partitions} --conditional-records {args.conditional_records}"
                 + (" --no-conditional" if args.no_conditional else ""))
        section = "\n".join([
            heading(args.broker), "",
            f"Command: `python bench/side_by_side_stock.py {flags} --broker {args.broker}` "
            "(one run per contender and rate, each in its own process, sequentially; not "
            f"repeated). Machine: {machine()}. Versions: {versions()}.",
            "Workload: side_by_side_copy.py's (12-byte keys, 100-byte values, random gaps of "
            "1..100 offsets at the gap rate), each run to its own fresh topic, timed from the "
            "first call to flush() returning; acks=all, idempotent. kipproducer: "
            "`kip.mode=emulated`, produce_arrays(offsets=) in calls of 100,000 records "
            "(docs/stock-clusters.md); transactions: the gap transactions the emulation "
            "wrote. Conditional appends: `append(expected_offset=E)` in a loop, one process "
            "per row; emulated on Apache Kafka (each batch a transaction, the next "
            "expectation first + n + 1), native on a `kip broker` (one Produce request with "
            "ProduceMode 2).", "", *out, ""])
        replace_section(args.write, heading(args.broker), section)


def conditional(args, stock: BenchBroker, say) -> None:
    """Conditional appends of batches of 1, 100 and 10,000 records: native on a `kip broker`
    of its own, emulated on the stock broker, side by side."""
    native_dir, _ = broker_data_dir("kip-bench-native-")
    native_proc, native = start_kip_broker(native_dir)
    try:
        say("\n| conditional batch | mode | records/s | batches/s |\n|---|---|---|---|")
        for size in (1, 100, 10_000):
            total = max(size, min(args.conditional_records, size * 200))
            for mode, where, rf in (("native", native, 1),
                                    ("emulated", stock.bootstrap, stock.replication)):
                create_topics(where, f"cond-{mode}-{size}", replication=rf)
                done = subprocess.run(
                    [sys.executable, __file__, "--child", "conditional",
                     "--bootstrap", where, "--topic", f"cond-{mode}-{size}",
                     "--records", str(total), "--size", str(size), "--mode", mode],
                    capture_output=True, text=True, env=child_env(), check=True)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                say(f"| {size:,} | {mode} | {got['records'] / got['seconds']:,.0f} | "
                    f"{got['records'] / size / got['seconds']:,.1f} |")
    finally:
        native_proc.kill()
        native_proc.wait()
        shutil.rmtree(native_dir, ignore_errors=True)


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


if __name__ == "__main__":
    main()
