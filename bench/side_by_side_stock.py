"""Side-by-side on the stand-in for stock Kafka (`kip broker --config
kip.extensions.enable=false`): an emulated offset copy (produce_arrays(offsets=...) through
Kafka's transactions, docs/stock-clusters.md) against confluent-kafka's plain produce() of the
same records, and conditional appends of batches of 1, 100 and 10,000 records, emulated on the
stand-in and native on a `kip broker` with the extension.

The records are side_by_side_copy.py's workload (12-byte keys, 100-byte values, offsets with
random gaps of 1..100 at the given gap rates). One run per contender and rate, each in its own
process, sequentially, to its own fresh topic; timed from the first call to flush() returning.
Transactions per second: the transactions the method needed (one per gap: an empty aborted
one for a gap of one offset, fillers and an abort for a longer one) divided by the run's time.

    python bench/side_by_side_stock.py [--records N] [--gap-rate F[,F...]]
        [--conditional-records N] [--no-conditional]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time

from bench_support import child_env, create_topics, start_kip_broker
from side_by_side_copy import workload

CHUNK = 100_000


def start_standin(data_dir: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kipproducer", "broker", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, "--log-level", "warning",
         "--config", "kip.extensions.enable=false"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(), text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"broker did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


def run_copy(name: str, bootstrap: str, topic: str, n: int, rate: float) -> dict:
    import numpy as np
    from confluent_kafka import Producer as CkProducer

    from kipproducer import Producer
    from kipproducer.stock.plan import Step, plan_runs

    keys, values, offsets = workload(n, rate)
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
        txns = sum(a.step != Step.PLAIN for a in plan_runs(0, offsets))
    t0 = time.perf_counter()
    if name == "confluent":
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, values[i], keys[i], partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 10000 == 0:
                producer.poll(0)
    else:
        key_col, value_col = np.array(keys, dtype=object), np.array(values, dtype=object)
        for start in range(0, n, CHUNK):
            producer.produce_arrays(topic, value_col[start:start + CHUNK],
                                    keys=key_col[start:start + CHUNK], partition=0,
                                    offsets=offsets[start:start + CHUNK])
    left = producer.flush(600)
    seconds = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{name}: {left} records not delivered")
    return {"seconds": seconds, "txns": txns}


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
                       float(args.gap_rate))
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--gap-rate", default="0,0.0001,0.01,0.1")
    ap.add_argument("--conditional-records", type=int, default=20_000)
    ap.add_argument("--no-conditional", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--size", type=int, default=1)
    ap.add_argument("--mode", default="emulated")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as data:
        proc, bootstrap = start_standin(data)
        try:
            def spawn(kind: str, topic: str, *extra: str) -> dict:
                create_topics(bootstrap, topic)
                out = subprocess.run([sys.executable, __file__, "--child", kind, "--bootstrap",
                                      bootstrap, "--topic", topic, *extra],
                                     capture_output=True, text=True, env=child_env(),
                                     check=True)
                return json.loads(out.stdout.strip().splitlines()[-1])

            n = args.records
            base = spawn("confluent", "c-0", "--records", str(n), "--gap-rate", "0")
            rate_c = n / base["seconds"]
            print(f"| contender | gap rate | records/s | vs confluent | transactions | "
                  f"transactions/s |\n|---|---|---|---|---|---|\n"
                  f"| confluent produce() | - | {rate_c:,.0f} | 1.00x | 0 | - |")
            for i, rate in enumerate(float(r) for r in args.gap_rate.split(",")):
                got = spawn("emulated", f"e-{i}", "--records", str(n), "--gap-rate",
                            str(rate))
                r = n / got["seconds"]
                print(f"| emulated produce_arrays(offsets=) | {rate:g} | {r:,.0f} | "
                      f"{r / rate_c:.2f}x | {got['txns']:,} | "
                      f"{got['txns'] / got['seconds']:,.0f} |", flush=True)
            if args.no_conditional:
                return
            native_dir = tempfile.mkdtemp()
            native_proc, native = start_kip_broker(native_dir)
            try:
                print("\n| conditional batch | mode | records/s | batches/s |\n"
                      "|---|---|---|---|")
                for size in (1, 100, 10_000):
                    total = max(size, min(args.conditional_records, size * 200))
                    for mode, where in (("native", native), ("emulated", bootstrap)):
                        create_topics(where, f"cond-{mode}-{size}")
                        out = subprocess.run(
                            [sys.executable, __file__, "--child", "conditional",
                             "--bootstrap", where, "--topic", f"cond-{mode}-{size}",
                             "--records", str(total), "--size", str(size), "--mode", mode],
                            capture_output=True, text=True, env=child_env(), check=True)
                        got = json.loads(out.stdout.strip().splitlines()[-1])
                        print(f"| {size:,} | {mode} | {got['records'] / got['seconds']:,.0f} | "
                              f"{got['records'] / size / got['seconds']:,.1f} |", flush=True)
            finally:
                native_proc.kill()
                native_proc.wait()
                shutil.rmtree(native_dir, ignore_errors=True)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
