"""Side-by-side: an offset-preserving copy through kipproducer's produce_arrays(offsets=...)
(KIP-391) against confluent-kafka's plain produce() of the same records, to one `kip broker`
(or Apache Kafka, ``--broker``).

The records are what a copy of a compacted or transactional topic carries: N records with
12-byte keys and 100-byte values whose offsets have random gaps (by default none, 0.1%, 0.3%
and 1% of the steps between two records skip 1..100 offsets). kipproducer writes each record
at its offset, so every run of consecutive offsets is its own batch; confluent-kafka cannot
choose offsets and sends the same keys and values with broker-assigned offsets (what a copy
that does not keep offsets costs); kipproducer's produce_arrays without offsets runs too, as
a reference for what the gaps cost on their own. All: acks=all, enable.idempotence=true,
linger.ms=5, one partition, each run to its own fresh topic on the same broker, one warm-up
record to another topic first, then timed from the first call to flush() returning with
every delivery report in. Each run is its own process (CPU = all its threads; peak RSS = its
VmHWM); the contenders alternate and the median of --repeat runs is reported. After every
kip run the target is checked: its watermarks must be (first offset, last offset + 1) and a
sample of offsets (records and holes) is read back with a stock librdkafka consumer.

A gap model is ``F`` (a share F of the steps skip 1..100 offsets) or ``F:M`` (a share F
skip 1..M offsets): ``0.5:1`` makes every step 1 or 2 offsets, runs of about two records as in
a heavily compacted changelog (issue 30). ``--callbacks on`` (the default) gives confluent a
per-record ``on_delivery`` and kip a per-batch report; ``off`` calls both without callbacks
(the topic's high watermark is checked after every run); ``both`` runs each contender both
ways in every round, interleaved.

``--broker`` picks the broker the bench starts: ``kip`` (`kip broker`, the default: KIP-391 is
native there), or Apache Kafka with 1 or 3 KRaft nodes (``kafka1``, ``kafka3``; the jars the
tests cache, tests/apache_kafka; issue 43). Apache Kafka has no KIP-391, so there the kip
lanes' offsets go through the emulation (``kip.mode`` auto picks it: every gap a transaction,
docs/stock-clusters.md; each run checks ``Producer.kip_mode(topic)`` says which), and the
check reads the target with read_committed (the holes hold aborted fillers). On 3 nodes the
topics have replication factor 3 (min.insync.replicas 2); acks=all throughout. The report's
heading names the broker, so ``--write`` keeps one section per broker.

    python bench/side_by_side_copy.py [--records N] [--repeat R]
        [--gap-rate F[:M][,F[:M]...]] [--callbacks on|off|both] [--broker kip|kafka1|kafka3]
        [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_support import (
    BROKERS,
    Deliveries,
    brokers_cpu,
    child_env,
    create_topics,
    delete_topics,
    high_watermark,
    load_average,
    node_count,
    peak_rss_mib,
    start_broker,
    stop_on_sigterm,
    versions,
)

KEY_SIZE, VALUE_SIZE = 12, 100
HEADING = "## Offset-preserving copy (issue 5)"
ISSUE30_HEADING = "## Offset-preserving copy with and without callbacks (issue 30)"
KIP = "kip produce_arrays(offsets=)"
KIP_ASSIGNED = "kip produce_arrays"
CONFLUENT = "confluent produce()"
# kip produce_arrays without offsets is a reference: the same engine, broker-assigned offsets,
# so the table shows what keeping the offsets (and their gaps) costs on its own.
CONTENDERS = [CONFLUENT, KIP, KIP_ASSIGNED]
PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                   "queue.buffering.max.messages": 2_000_000,
                   "queue.buffering.max.kbytes": 2_097_151}
CHUNK = 100_000
TARGET = 2.0  # issue 5: the offset copy at >= 2x confluent-kafka's produce()
MAX_GAP = 100
SEED = 391


def gap_model(spec: str) -> tuple[float, int]:
    """``F`` or ``F:M`` -> (share of the steps that skip offsets, most offsets one skips)."""
    rate, _, most = str(spec).partition(":")
    return float(rate), int(most) if most else MAX_GAP


def workload(n: int, gap: str):
    """The same records in every process: keys, values, and offsets with random gaps."""
    import numpy as np

    gap_rate, most = gap_model(gap)
    rng = np.random.default_rng(SEED)
    keys = [b"k%011d" % i for i in range(n)]
    blob = rng.bytes(n * VALUE_SIZE)
    values = [blob[i * VALUE_SIZE:(i + 1) * VALUE_SIZE] for i in range(n)]
    steps = np.where(rng.random(n) < gap_rate, rng.integers(2, most + 2, n), 1)
    steps[0] = 0
    offsets = np.cumsum(steps, dtype=np.int64)  # first offset 0: low watermark = first offset
    return keys, values, offsets


def kafka_heading(nodes: int, callbacks: str) -> str:
    """The report's heading on Apache Kafka: one section per node count (and per
    --callbacks, as on `kip broker`), beside the `kip broker` ones."""
    way = "" if callbacks == "on" else " with and without callbacks"
    return f"## Offset-preserving copy{way} on Apache Kafka, {node_count(nodes)} (issue 43)"


def run_one(name: str, bootstrap: str, n: int, topic: str, gap_rate: str,
            callbacks: bool = True, emulation_id: str = "") -> dict:
    """In a child process: send the n records the way ``name`` does; rate, CPU, RSS, and
    for the offset copy how ``kip.mode`` reaches the topic (``Producer.kip_mode``).
    ``emulation_id``: the ``kip.emulation.transactional.id`` the emulated offsets need (a
    stock broker); empty on `kip broker`."""
    import numpy as np
    from confluent_kafka import Producer as CkProducer

    from kipproducer import Producer

    keys, values, offsets = workload(n, gap_rate)
    config = {"bootstrap.servers": bootstrap, **PRODUCER_CONFIG}
    counts = Deliveries()
    # Without callbacks nothing is counted here; the parent reads the topic's high watermark.
    on_record = counts.on_record if callbacks else None
    on_batch = counts.on_batch if callbacks else None

    if name != CONFLUENT and emulation_id:
        config["kip.emulation.transactional.id"] = emulation_id
    producer = CkProducer(config) if name == CONFLUENT else Producer(config)
    producer.list_topics(topic, timeout=10)
    # native on `kip broker`, emulated on Apache Kafka; the probe runs here, untimed
    kip_mode = producer.kip_mode(topic) if name == KIP else ""
    # Warm-up, untimed: one record to another topic, so both have their connection, metadata
    # and producer id before the timer starts (kipproducer's engine starts at its first send).
    warm = f"{topic}-warm-up"
    if name == CONFLUENT:
        producer.produce(warm, b"v", b"k", partition=0)
    elif name == KIP:
        producer.produce_arrays(warm, [b"v"], keys=[b"k"], partition=0,
                                offsets=np.array([7], dtype=np.int64))
    else:
        producer.produce_arrays(warm, [b"v"], keys=[b"k"], partition=0)
    if producer.flush(30):
        raise RuntimeError(f"{name}: warm-up record not delivered")
    if name != CONFLUENT:
        key_col = np.array(keys, dtype=object)
        value_col = np.array(values, dtype=object)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if name == CONFLUENT:
        produce = producer.produce
        for i in range(n):
            while True:
                try:
                    if on_record is None:
                        produce(topic, values[i], keys[i], partition=0)
                    else:
                        produce(topic, values[i], keys[i], partition=0, on_delivery=on_record)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 10000 == 0:
                producer.poll(0)
    else:
        for start in range(0, n, CHUNK):
            end = start + CHUNK
            producer.produce_arrays(topic, value_col[start:end], keys=key_col[start:end],
                                    partition=0, on_delivery=on_batch,
                                    offsets=offsets[start:end] if name == KIP else None)
    left = producer.flush(300)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if callbacks:
        counts.check(name, n, left)
    elif left:
        raise RuntimeError(f"{name}: {left} records left after flush()")
    return {"seconds": elapsed, "cpu": cpu, "rss_mib": peak_rss_mib(), "kip_mode": kip_mode}


# ---- checking the copy -------------------------------------------------------------------------


def verify_copy(bootstrap: str, topic: str, n: int, gap_rate: str, samples: int = 60) -> str:
    """Watermarks = (first offset, last offset + 1); sampled records and holes read back
    (read_committed: on a stock broker the emulation fills holes with aborted records)."""
    import numpy as np
    from confluent_kafka import Consumer, TopicPartition

    keys, values, offsets = workload(n, gap_rate)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                         "enable.auto.commit": False, "check.crcs": True,
                         "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                                   cached=False)
        want = (int(offsets[0]), int(offsets[-1]) + 1)
        if (low, high) != want:
            raise AssertionError(f"{topic}: watermarks {(low, high)}, want {want}")
        rng = np.random.default_rng(7)
        picks = sorted({0, n - 1, *rng.integers(0, n, samples).tolist()})
        holes = np.flatnonzero(np.diff(offsets) > 1)  # a hole after index i
        hole_picks = rng.choice(holes, min(len(holes), samples // 3), replace=False) \
            if len(holes) else []
        checks = [(int(offsets[i]), i) for i in picks]
        # Asking for an offset inside a hole gives the record after the hole, as Kafka does.
        checks += [(int(offsets[i]) + 1, i + 1) for i in hole_picks]
        for asked, index in checks:
            consumer.assign([TopicPartition(topic, 0, asked)])
            deadline = time.monotonic() + 10
            msg = None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is not None:
                    raise AssertionError(f"{topic} @ {asked}: {msg.error()}")
            if msg is None:
                raise AssertionError(f"{topic} @ {asked}: nothing read back")
            got = (msg.offset(), msg.key(), msg.value())
            if got != (int(offsets[index]), keys[index], values[index]):
                raise AssertionError(f"{topic} @ {asked}: read offset {msg.offset()} key "
                                     f"{msg.key()!r}, want {int(offsets[index])} "
                                     f"{keys[index]!r}")
    finally:
        consumer.close()
    return (f"watermarks {low}..{high} = (first, last + 1); {len(checks)} offsets read back "
            f"({len(hole_picks)} inside holes)")


# ---- the run -----------------------------------------------------------------------------------


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gap-rate", default="0,0.001,0.003,0.01",
                    help="gap models, comma-separated: F (a share F of the steps between two "
                         "records skip 1..100 offsets) or F:M (skip 1..M offsets; 0.5:1 = "
                         "every step 1 or 2 offsets); the offset copy runs once per model "
                         "(default 0,0.001,0.003,0.01)")
    ap.add_argument("--callbacks", choices=["on", "off", "both"], default="on",
                    help="delivery callbacks on every side (on, the default), none (off), or "
                         "each contender both ways in every round (both)")
    ap.add_argument("--no-callbacks", dest="callbacks", action="store_const", const="off",
                    help="the same as --callbacks off")
    ap.add_argument("--broker", choices=list(BROKERS), default="kip",
                    help="kip broker (default; KIP-391 native), or Apache Kafka with 1 or 3 "
                         "KRaft nodes (kafka1, kafka3; the offsets emulated)")
    ap.add_argument("--write", metavar="PATH")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--emulation-id", default="", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.records
    rates = [r.strip() for r in str(args.gap_rate).split(",") if r.strip()]
    for spec in rates:
        gap_model(spec)  # a bad model fails here, before any run
    if args.one:
        print(json.dumps(run_one(args.one, args.bootstrap, n, args.topic, rates[0],
                                 args.callbacks != "off", args.emulation_id)))
        return

    import numpy as np

    modes = {"on": [True], "off": [False], "both": [True, False]}[args.callbacks]
    # (lane, gap model, callbacks): the lanes without offsets send the same keys and values
    # whatever the model, so they run once per round and way; the offset copy once per model.
    lanes = [(CONFLUENT, rates[0]), *[(KIP, rate) for rate in rates], (KIP_ASSIGNED, rates[0])]
    jobs = [(name, rate, mode) for name, rate in lanes for mode in modes]
    load0, loadavg0 = os.getloadavg()[0], load_average()
    nodes = BROKERS[args.broker]
    want_mode = "emulated" if nodes else "native"
    stop_on_sigterm()
    broker = start_broker(args.broker, "kip-bench-copy-")
    bootstrap, data_where, pids = broker.bootstrap, broker.data_where, broker.pids
    results: dict[tuple[str, str, bool], list[dict]] = {job: [] for job in jobs}
    checked: dict[str, str] = {}
    t_run = time.perf_counter()
    try:
        for rnd in range(args.repeat):
            for number, (name, rate, mode) in enumerate(jobs):  # alternating: drift hits all
                topic = f"copy-{number}-{rnd}"
                create_topics(bootstrap, topic, f"{topic}-warm-up",
                              replication=broker.replication)
                cpu0 = brokers_cpu(pids)
                out = subprocess.run(
                    [sys.executable, __file__, "--one", name, "--bootstrap", bootstrap,
                     "--topic", topic, "--records", str(n), "--gap-rate", rate,
                     "--callbacks", "on" if mode else "off",
                     "--emulation-id", f"bench-copy-{topic}" if nodes else ""],
                    capture_output=True, text=True, env=child_env(), timeout=900)
                if out.returncode != 0:
                    raise RuntimeError(f"{name} failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                result["broker_cpu"] = brokers_cpu(pids) - cpu0
                if name == KIP and result["kip_mode"] != want_mode:
                    raise RuntimeError(f"{name}: Producer.kip_mode() says "
                                       f"{result['kip_mode']!r} on {args.broker}, want "
                                       f"{want_mode!r}")
                results[(name, rate, mode)].append(result)
                line = (f"{name:30s} {'cb' if mode else 'no cb'} "
                        f"{n / result['seconds'] / 1e6:6.3f} M rec/s "
                        f"cpu {result['cpu']:.2f} s broker cpu {result['broker_cpu']:.2f} s "
                        f"rss {result['rss_mib']:.0f} MiB")
                if name == KIP:
                    checked[rate] = verify_copy(bootstrap, topic, n, rate)
                    line += f" (gaps {rate}); checked: {checked[rate]}"
                elif not mode and high_watermark(bootstrap, topic) != n:
                    raise RuntimeError(f"{name}: the topic does not hold {n} records")
                print(line, file=sys.stderr)
                delete_topics(bootstrap, topic, f"{topic}-warm-up")
    finally:
        broker.stop()
    took = time.perf_counter() - t_run
    load1, loadavg1 = os.getloadavg()[0], load_average()

    rows = []
    for name, rate, mode in jobs:
        runs = results[(name, rate, mode)]
        speed = n / statistics.median(r["seconds"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs) * 1e6 / n
        bcpu = statistics.median(r["broker_cpu"] for r in runs) * 1e6 / n
        rss = max(r["rss_mib"] for r in runs)
        rows.append((name, rate, mode, speed, cpu, bcpu, rss))
    base = {mode: speed for name, _, mode, speed, *_ in rows if name == CONFLUENT}
    from results_file import machine

    def described(rate: str) -> str:
        _, _, offsets = workload(n, rate)
        gaps = int(np.count_nonzero(np.diff(offsets) > 1))
        share, most = gap_model(rate)
        return (f"gaps {rate} (a share {share:g} of the steps skip 1..{most} offsets): offsets "
                f"0..{int(offsets[-1]):,} with {gaps:,} gaps ({gaps + 1:,} runs of "
                f"consecutive offsets, {n / (gaps + 1):.1f} records per run)")

    issue30 = args.callbacks != "on"
    heading = (kafka_heading(nodes, args.callbacks) if nodes
               else ISSUE30_HEADING if issue30 else HEADING)
    callback_words = {
        "on": "confluent gets a per-record on_delivery, kip a per-batch report. ",
        "off": "No delivery callbacks on either side (the topic's high watermark is checked "
               "after every run). ",
        "both": "Each contender runs twice per round, interleaved: with callbacks "
                "(confluent a per-record on_delivery, kip a report per Kafka batch, that is "
                "per run of offsets) and without any (the topic's high watermark is checked "
                "after every run). "}[args.callbacks]
    flags = f" --callbacks {args.callbacks}" if issue30 else ""
    if nodes:
        flags += f" --broker {args.broker}"
    if nodes:
        wire_words = (
            "Apache Kafka has no KIP-391: the offset copy runs emulated (`kip.mode` auto; "
            f"every run's `Producer.kip_mode(topic)` said {want_mode!r}): runs of consecutive "
            "offsets go out through the bulk lane and each gap costs a transaction of aborted "
            "fillers (an empty aborted one for a gap of one offset; docs/stock-clusters.md), "
            "with a `kip.emulation.transactional.id` per run; the check reads with "
            "read_committed. ")
    else:
        wire_words = (
            "Every run of consecutive offsets is its own batch (KIP-WIRE: offset deltas "
            "0..n-1); the broker advertises KIP-WIRE version 2, so the engine sends a "
            "partition's waiting batches as one unit of up to 1 MiB per request, and the gap "
            "rate sets the batch count, not the request count. ")
    lines = [
        heading, "",
        f"Command: `python bench/side_by_side_copy.py --records {n} --repeat "
        f"{args.repeat} --gap-rate {','.join(rates)}{flags}` (median of "
        f"{args.repeat} alternating runs, one process per run; whole run {took:.0f} s).",
        f"Machine: {machine()}; client and {broker.words} share it, on loopback; the "
        f"broker's data dir {data_where}; 1-minute load "
        f"average {load0:.2f} before and {load1:.2f} after"
        + (f" (/proc/loadavg before: {loadavg0}; after: {loadavg1})" if issue30 else "") + ".",
        f"Versions: {versions()}.",
        f"Workload: {n:,} records, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values (random, the "
        "same for all), 1 partition. The offset copy's gap models: "
        + "; ".join(described(r) for r in rates) + ". " + wire_words
        + "acks=all, enable.idempotence=true, linger.ms=5 for all, each run to its own fresh "
        "topic on the same broker. " + callback_words + "Each contender first delivers one "
        "record to a warm-up "
        "topic (connection, metadata, producer id), then is timed from the first call to "
        "flush() returning with every delivery report in; kip calls produce_arrays with numpy "
        f"object columns, {CHUNK:,} records per call. `kip produce_arrays` without offsets is "
        "a reference: the same engine with broker-assigned offsets. CPU is the contender's "
        "process (all threads), broker CPU the broker processes' (every node's) over the run; "
        "peak RSS the "
        "contender's VmHWM. After each run (and its check) its topics are deleted, so every "
        "run starts from the same memory (bench_support.delete_topics).",
        "Checked after every offset-copy run: " + "; ".join(
            f"gaps {r}: {checked.get(r, '-')}" for r in rates) + ".",
        "",
        "| lane | offsets | callbacks | records/s | MB/s | CPU s per 1M records | broker CPU "
        "s per 1M | peak RSS | vs confluent produce() (same callbacks) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rate, mode, speed, cpu, bcpu, rss in rows:
        kept = (f"kept, gaps {rate} (KIP-391{', emulated' if nodes else ''})" if name == KIP
                else "assigned by the broker")
        lines.append(f"| {name} | {kept} | {'yes' if mode else 'no'} | {speed / 1e6:.2f} M | "
                     f"{speed * (KEY_SIZE + VALUE_SIZE) / 1e6:.0f} | {cpu:.2f} | {bcpu:.2f} | "
                     f"{rss:.0f} MiB | {speed / base[mode]:.2f}x |")
    # Shared machines drift between runs: the ratio within each round (the kip run against
    # the confluent run of the same round and way) says how far the median can be trusted.
    verdicts = []
    for mode in modes:
        confluent_runs = [r["seconds"] for r in results[(CONFLUENT, rates[0], mode)]]
        for rate in rates:
            per_round = [c / k["seconds"] for c, k in zip(
                confluent_runs, results[(KIP, rate, mode)], strict=True)]
            median = statistics.median(per_round)
            verdicts.append(
                f"gaps {rate}, {'with' if mode else 'without'} callbacks: "
                + ", ".join(f"{r:.2f}x" for r in per_round) + f" (median {median:.2f}x"
                # issue 5's target is for the native copy; the emulation has none
                + ("" if nodes else
                   f", target {TARGET:g}x {'met' if median >= TARGET else 'NOT met'}") + ")")
    lines += ["", "The offset copy / confluent produce() within each of the "
              f"{args.repeat} rounds: " + "; ".join(verdicts) + "."]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        from results_file import replace_section

        replace_section(args.write, heading, section)


if __name__ == "__main__":
    main()
