"""kip mirror vs a confluent Consumer -> Producer loop, side by side in one run (issue 17).

Two `kip broker`s (a source and a target, data dirs on tmpfs when there is one). The source
holds N records over 3 partitions (12-byte keys, 100-byte values, a header each), and a copy
of it where half the offsets are gone, in holes of 1 to 16 offsets (written with KIP-391
offsets: a compacted topic's shape). Each contender copies a source topic to its own target
topic, one process per run, alternating, and is timed from its start to the last record
acknowledged (committed, in the transactional mode):

- confluent loop: confluent_kafka.Consumer (assign, read to the end) -> confluent_kafka.
  Producer.produce() per record (key, value, headers, timestamp, partition kept), flush(): what
  a user writes today; acks=all, idempotent;
- kip mirror preserve: kipproducer.mirror.Mirror(mode="preserve").run(once=True) (its fast
  path: the source read with Fetch, whole record batches forwarded);
- kip mirror transactional: Mirror(mode="transactional", group=...).run(once=True).

Usage: python bench/side_by_side_mirror.py [--records N] [--repeat R] [--write bench/RESULTS.md]
(after the README's install; with a checkout built in place, its src/ is used).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time

from bench_support import broker_data_dir, child_env, start_kip_broker

HEADING = "## Mirror: kip mirror vs a confluent Consumer -> Producer loop (issue 17)"
PARTITIONS = 3
CONFLUENT = "confluent loop"
PRESERVE = "kip mirror preserve"
TRANSACTIONAL = "kip mirror transactional"
SOURCES = {"dense": "src-dense", "half": "src-half-gone"}


def fill(bootstrap: str, n: int) -> None:
    import numpy as np
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer import Producer

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in SOURCES.values():
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    per = n // PARTITIONS
    rng = np.random.default_rng(7)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5})
    for part in range(PARTITIONS):
        blob = rng.bytes(per * 100)
        values = [blob[i * 100:(i + 1) * 100] for i in range(per)]
        keys = [b"key-%08d" % i for i in range(per)]
        headers = [[("trace", b"%d" % i)] for i in range(per)]
        p.produce_arrays(SOURCES["dense"], values, keys=keys, headers=headers, partition=part)
        # Half the offsets gone, in holes of 1 to 16 offsets between runs of 1 to 16 records,
        # as in a compacted topic. (Every other offset gone would make every record its own
        # batch, the case issue 15's KIP-WIRE v2 is for.)
        runs = rng.integers(1, 17, per)
        holes = rng.integers(1, 17, per)
        offsets = np.empty(per, np.int64)
        at, i, r = 0, 0, 0
        while i < per:
            take = min(int(runs[r]), per - i)
            offsets[i:i + take] = np.arange(at, at + take)
            i += take
            at += take + int(holes[r])
            r += 1
        p.produce_arrays(SOURCES["half"], values, keys=keys, headers=headers, partition=part,
                         offsets=offsets)
    if p.flush(120):
        raise RuntimeError("the source was not filled")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_confluent(source: str, target: str, topic: str, out: str, n: int) -> int:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target})  # the mirror creates its own
    admin.create_topics([NewTopic(out, PARTITIONS, 1)])[out].result(30)
    consumer = Consumer({"bootstrap.servers": source, "group.id": f"bench-{out}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    at_end: set[int] = set()
    copied = 0
    while len(at_end) < PARTITIONS:
        for m in consumer.consume(10_000, 0.1):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise RuntimeError(m.error().str())
            at_end.discard(m.partition())
            while True:
                try:
                    producer.produce(out, m.value(), m.key(), partition=m.partition(),
                                     headers=m.headers(), timestamp=m.timestamp()[1])
                    break
                except BufferError:
                    producer.poll(0.01)
            copied += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("confluent loop: records left")
    consumer.close()
    return copied


def run_one(lane: str, source: str, target: str, topic: str, out: str, n: int) -> dict:
    from kipproducer.mirror import Mirror

    t0, c0 = time.perf_counter(), cpu_seconds()
    if lane == CONFLUENT:
        copied = run_confluent(source, target, topic, out, n)
    else:
        mode = "preserve" if lane == PRESERVE else "transactional"
        snapshot = Mirror(source, target, topic, mode=mode, group=f"bench-{out}",
                          rename=out + ".{topic}", progress=False).run(once=True)
        copied = snapshot["records"]
    return {"seconds": time.perf_counter() - t0, "cpu": cpu_seconds() - c0,
            "copied": copied}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", metavar="PATH")
    ap.add_argument("--one", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.records - args.records % PARTITIONS
    if args.one:
        lane, source, target, topic, out = args.one
        print(json.dumps(run_one(lane, source, target, topic, out, n)))
        return

    jobs = [(CONFLUENT, "dense"), (PRESERVE, "dense"), (TRANSACTIONAL, "dense"),
            (CONFLUENT, "half"), (PRESERVE, "half")]
    dirs = [broker_data_dir("kip-bench-mirror-") for _ in range(2)]
    brokers = [start_kip_broker(d) for d, _ in dirs]
    (src_proc, source), (dst_proc, target) = brokers
    results: dict[tuple[str, str], list[dict]] = {job: [] for job in jobs}
    t_run = time.perf_counter()
    try:
        fill(source, n)
        for rnd in range(args.repeat):
            for number, (lane, shape) in enumerate(jobs):
                out = f"copy-{rnd}-{number}"
                proc = subprocess.run(
                    [sys.executable, __file__, "--records", str(n), "--one", lane, source,
                     target, SOURCES[shape], out],
                    capture_output=True, text=True, env=child_env(), timeout=1800)
                if proc.returncode != 0:
                    raise RuntimeError(f"{lane} failed:\n{proc.stderr[-3000:]}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                if result["copied"] != n:
                    raise RuntimeError(f"{lane} copied {result['copied']} of {n}")
                results[(lane, shape)].append(result)
                print(f"{lane:26s} {shape:6s} {n / result['seconds'] / 1e6:6.3f} M rec/s "
                      f"cpu {result['cpu']:.2f} s", file=sys.stderr)
    finally:
        for proc, _ in brokers:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for d, _ in dirs:
            shutil.rmtree(d, ignore_errors=True)
    took = time.perf_counter() - t_run

    from results_file import machine, replace_section

    def speed(job: tuple[str, str]) -> float:
        return n / statistics.median(r["seconds"] for r in results[job])

    def cpu(job: tuple[str, str]) -> float:
        return statistics.median(r["cpu"] for r in results[job]) * 1e6 / n

    lines = [
        HEADING, "",
        f"Command: `python bench/side_by_side_mirror.py --records {args.records} --repeat "
        f"{args.repeat}`"
        f" (median of {args.repeat} alternating runs, one process per run; whole run "
        f"{took:.0f} s). Machine: {machine()}; brokers: two `kip broker`s, data "
        f"{dirs[0][1]}.", "",
        f"Workload: {n:,} records over {PARTITIONS} partitions (12-byte keys, 100-byte "
        "values, one header); `half` is the same records with half the offsets gone, in holes "
        "of 1 to 16 offsets between runs of 1 to 16 records (a compacted topic's shape). "
        "Each contender copies the whole topic to a new target "
        "topic and is timed until the last record is acknowledged (committed in the "
        "transactional mode); CPU is the contender's process.", "",
        "| contender | source | records/s | client CPU us/record | vs confluent loop |",
        "|---|---|---:|---:|---:|",
    ]
    for job in jobs:
        base = speed((CONFLUENT, job[1]))
        lines.append(f"| {job[0]} | {job[1]} | {speed(job) / 1e6:.3f} M | {cpu(job):.2f} | "
                     f"{speed(job) / base:.2f}x |")
    lines += ["", f"Issue 17's targets: preserve >= 5x the confluent loop (measured "
              f"{speed((PRESERVE, 'dense')) / speed((CONFLUENT, 'dense')):.2f}x dense, "
              f"{speed((PRESERVE, 'half')) / speed((CONFLUENT, 'half')):.2f}x half gone), "
              f"transactional >= 3x (measured "
              f"{speed((TRANSACTIONAL, 'dense')) / speed((CONFLUENT, 'dense')):.2f}x).", "",
              "How: the mirror reads the source with Fetch requests of its own and hands "
              "whole record batches to the engine, whose C code copies each record's key, "
              "value and headers bytes as they are (mirror/fetcher.py, docs/mirror.md); no "
              "record becomes a Python object. The confluent loop pays a consume() and a "
              "produce() per record (its client CPU per record is in the table). The "
              "mirror's client CPU is in the table too; the rest "
              "of its time is the two brokers' work (both `kip broker`s in Python) and the "
              "start and end of a run (topic checks, resume points, group offset sync).", ""]
    section = "\n".join(lines)
    print(section)
    if args.write:
        replace_section(args.write, HEADING, section)


if __name__ == "__main__":
    main()
