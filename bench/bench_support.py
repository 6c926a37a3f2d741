"""Shared by the producer and copy side-by-side scripts: the `kip broker` they run against,
topics, delivery counting, the broker's CPU and the contender process's peak memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _src_is_built() -> bool:
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
    if _src_is_built():
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


def create_topics(bootstrap: str, *topics: str) -> None:
    """One-partition topics."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for name in topics:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


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
