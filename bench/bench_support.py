"""Shared by the producer and copy side-by-side scripts: the broker they run against (`kip
broker`, or a real Apache Kafka of 1 or 3 nodes from the jars the tests cache), topics,
delivery counting, the broker's CPU and the contender process's peak memory."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The brokers a bench can run against (--broker): `kip broker`, Apache Kafka with 1 or 3 nodes.
BROKERS = {"kip": 0, "kafka1": 1, "kafka3": 3}


def broker_cpu(pid: int) -> float:
    """CPU seconds of the broker process so far, all its threads; 0 where /proc is missing.

    From each thread's schedstat (nanoseconds) where the kernel has it: /proc's stat counts in
    ticks of 10 ms, too coarse for a 0.1 s run. Threads that have exited are not in the sum,
    so take differences across a span in which the broker's threads live on (kip broker's
    do)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def brokers_cpu(pids: Iterable[int]) -> float:
    """CPU seconds so far of every broker process (a cluster's nodes), summed."""
    return sum(broker_cpu(pid) for pid in pids)


def tree_cpu(root: int, skip: Iterable[int] = ()) -> float:
    """CPU seconds so far of process ``root`` and every process under it, leaving out the
    subtrees of ``skip`` (a bench's brokers, children of the bench too).

    Per process its user + system time, exited threads included, plus that of the children it
    has reaped (a Spark driver's JVM, its Python daemon and the workers the daemon forks and
    reaps): /proc's stat, in ticks of 10 ms, fine for runs of a second or more. A child that
    exits and is reaped by ``root`` itself during the span counts too; take differences across
    a span in which the processes measured live on."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = sum(int(fields[i]) for i in (11, 12, 13, 14))
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    left_out, total, todo = set(skip), 0, [root]
    while todo:
        pid = todo.pop()
        if pid in left_out:
            continue
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def broker_data_dir(prefix: str) -> tuple[str, str]:
    """A fresh data dir for a benchmark's broker, and a phrase saying where it lives.

    On tmpfs (/dev/shm) when there is one: every run writes ~130 MB, and the kernel's writeback
    of earlier runs to the disk would otherwise land, as CPU and I/O stalls, in later runs,
    whichever contender they belong to. The broker still writes every batch (to page cache,
    as with a disk and no fsync); only the disk behind it is left out.
    """
    import tempfile

    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return tempfile.mkdtemp(prefix=prefix, dir=shm), "on tmpfs (/dev/shm)"
    return tempfile.mkdtemp(prefix=prefix), "in the temp dir"


def src_is_built() -> bool:
    """Does the checkout's src/ hold compiled extensions (an editable install or
    ``python setup.py build_ext --inplace``)? Without them it cannot be imported."""
    from importlib.machinery import EXTENSION_SUFFIXES

    package = os.path.join(ROOT, "src", "kipproducer")
    return any(os.path.exists(os.path.join(package, "_records" + suffix))
               for suffix in EXTENSION_SUFFIXES)


def child_env() -> dict[str, str]:
    """The environment of a child process: it imports kipproducer from this checkout when
    src/ is built in place, else the installed package (the README's ``pip install``)."""
    env = dict(os.environ)
    if src_is_built():
        env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_kip_broker(data_dir: str) -> tuple[subprocess.Popen, str]:
    """`kip broker` on a free loopback port: the process and its bootstrap address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kipproducer", "broker", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(), text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"broker did not start: {line!r}")
    return proc, line.removeprefix("listening on ")


def start_kip_broker_with(data_dir: str, config: dict[str, str]) -> tuple[subprocess.Popen,
                                                                         dict[str, str]]:
    """`kip broker` with more broker properties (``listeners`` among them): the process and
    each listener's address by protocol (its ``--listen`` one is PLAINTEXT)."""
    command = [sys.executable, "-m", "kipproducer", "broker", "--listen", "127.0.0.1:0",
               "--data-dir", data_dir, "--log-level", "warning"]
    for name, value in config.items():
        command += ["--config", f"{name}={value}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=child_env(), text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"broker did not start: {line!r}")
    listeners = {"PLAINTEXT": line.removeprefix("listening on ")}
    wanted = {spec.split("://")[0] for spec in config.get("listeners", "").split(",") if spec}
    while not wanted <= listeners.keys():
        line = proc.stdout.readline().strip()
        if not line.startswith("listener "):
            proc.kill()
            raise RuntimeError(f"broker did not name its listeners: {line!r}")
        protocol, _, address = line.removeprefix("listener ").partition("://")
        listeners.setdefault(protocol, address)
    return proc, listeners


def create_topics(bootstrap: str, *topics: str, replication: int = 1) -> None:
    """One-partition topics."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for name in topics:
        admin.create_topics([NewTopic(name, 1, replication)])[name].result(30)


def delete_topics(bootstrap: str, *topics: str) -> None:
    """Delete a finished run's topics. The benchmark broker keeps its data on tmpfs, that is
    in memory: left in place, a run of 4 contenders x 3 rounds x 1M records held ~1.6 GB, and
    from about 1.5 GB on this VM's page allocations slowed every process (system time of the
    client and the broker up ~4x, the same client's rate down to half), so the later rounds
    measured the machine, not the contenders. Each run starts from the same memory state."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.delete_topics(list(topics), operation_timeout=30).values():
        future.result(60)


def high_watermark(bootstrap: str, topic: str) -> int:
    """Partition 0's high watermark: how a run without callbacks shows all its records
    landed (each run writes to a fresh topic from offset 0)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermark-{topic}",
                         "log_level": 4})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                              cached=False)[1]
    finally:
        consumer.close()


def apache_kafka(module: str = "kafka_cluster") -> ModuleType:
    """A module of the tests' Apache Kafka harness, imported by path: by default
    kafka_cluster (KafkaCluster, and through it kafka_jars' cached jars), so the benchmarks
    start the same Kafka the tests do; or spark_kafka_jars (Spark's own Kafka connector)."""
    import importlib

    here = os.path.join(ROOT, "tests", "apache_kafka")
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(module)


@dataclass
class BenchBroker:
    """A broker a bench started: its listeners' addresses by protocol (PLAINTEXT, and SSL
    when asked for), the CA its TLS certificate is checked against, the PIDs whose CPU is the
    broker's, the replication factor of the bench's topics, and how to stop it."""
    choice: str
    listeners: dict[str, str]
    pids: list[int]
    stop: Callable[[], None]
    words: str
    data_where: str
    ca_pem: str = ""
    replication: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return self.listeners["PLAINTEXT"]


def stop_on_sigterm() -> None:
    """A bench stopped with SIGTERM leaves through SystemExit, so its ``finally`` clauses stop
    the brokers it started, rather than leaving an Apache Kafka cluster's JVMs running."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def node_count(nodes: int) -> str:
    """"1 node", "3 nodes": the words a report's heading uses for an Apache Kafka cluster."""
    return f"{nodes} node{'s' if nodes > 1 else ''}"


def start_broker(choice: str, prefix: str, *, tls: bool = False,
                 kafka_config: dict | None = None) -> BenchBroker:
    """The broker of ``--broker``: ``kip`` (`kip broker`), ``kafka1`` or ``kafka3`` (Apache
    Kafka with that many KRaft nodes, each broker and controller in one JVM, started from
    the jars tests/apache_kafka/kafka_jars.py caches). With ``tls`` it also has an SSL
    listener with a certificate for 127.0.0.1 from a CA made for the run (trustme).
    ``kafka_config``: more Apache Kafka broker properties (unused by `kip broker`)."""
    import shutil
    import tempfile

    if choice not in BROKERS:
        raise ValueError(f"unknown broker {choice!r}; known: {sorted(BROKERS)}")
    data_dir, data_where = broker_data_dir(prefix)
    nodes = BROKERS[choice]
    if nodes:
        kafka = apache_kafka()
        cluster = kafka.KafkaCluster(Path(data_dir), nodes=nodes, tls=tls,
                                       config=kafka_config)
        try:
            cluster.start()
        except BaseException:
            cluster.close()
            shutil.rmtree(data_dir, ignore_errors=True)
            raise
        listeners = {"PLAINTEXT": cluster.bootstrap}
        if tls:
            listeners["SSL"] = cluster.bootstrap_for("SSL")

        def stop_cluster() -> None:
            cluster.close()
            shutil.rmtree(data_dir, ignore_errors=True)

        from kafka_jars import KAFKA_VERSION

        heap = " ".join(kafka.NODE_HEAP)
        words = (f"Apache Kafka {KAFKA_VERSION}, {nodes} KRaft node{'s' if nodes > 1 else ''} "
                 f"(broker and controller in one JVM each, {heap}, serial GC; topics with "
                 f"replication factor {min(3, nodes)}, min.insync.replicas {min(2, nodes)})")
        return BenchBroker(choice, listeners, list(cluster.pids().values()), stop_cluster,
                           words, data_where, str(cluster.security.ca_pem or ""),
                           replication=min(3, nodes), extra={"cluster": cluster})
    config: dict[str, str] = {}
    cert_dir = ""
    ca_pem = ""
    if tls:
        cert_dir = tempfile.mkdtemp(prefix=prefix + "certs-")
        ca, broker_pem = make_certs(Path(cert_dir))
        ca_pem = str(ca)
        config = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(broker_pem)}
    proc, listeners = start_kip_broker_with(data_dir, config)

    def stop_kip() -> None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
        if cert_dir:
            shutil.rmtree(cert_dir, ignore_errors=True)

    return BenchBroker(choice, listeners, [proc.pid], stop_kip, "`kip broker`", data_where,
                       ca_pem)


def make_certs(directory: Path) -> tuple[Path, Path]:
    """A CA and the broker's key + certificate chain for 127.0.0.1: (ca.pem, broker.pem)."""
    import trustme

    ca = trustme.CA(organization_name="kip bench CA")
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    ca_pem, broker_pem = directory / "ca.pem", directory / "broker.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server.private_key_and_cert_chain_pem.write_to_path(str(broker_pem))
    return ca_pem, broker_pem


def versions() -> str:
    """kipproducer's git revision (with a mark when src/ has uncommitted changes),
    confluent-kafka's and librdkafka's versions, Python's."""
    import platform

    import confluent_kafka

    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if rev and dirty:
            rev += " + uncommitted changes in src/"
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return (f"kipproducer git {rev or '?'}, confluent-kafka {confluent_kafka.__version__} "
            f"(librdkafka {confluent_kafka.libversion()[0]}), python "
            f"{platform.python_version()}")


def load_average() -> str:
    """/proc/loadavg as it reads (1, 5, 15-minute loads, runnable/total tasks, last pid)."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


class Deliveries:
    """Counts what the delivery callbacks report: ``on_record`` for per-record callbacks
    (confluent-kafka's, produce_batch), ``on_batch`` for produce_arrays' BatchDelivery."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0

    def on_record(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1

    def on_batch(self, err, report) -> None:
        if err is None:
            self.delivered += report.count
            return
        if not self.failed:
            print(f"first failure: {err}", file=sys.stderr)
        self.failed += report.count

    def check(self, name: str, n: int, left: int) -> None:
        if left or self.failed or self.delivered != n:
            raise RuntimeError(f"{name}: left {left}, failed {self.failed}, "
                               f"delivered {self.delivered}")


def peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries the parent's high-water
    mark over fork + exec into ru_maxrss, so a big parent would inflate every child."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
