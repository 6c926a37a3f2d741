"""A Spark standalone cluster on 127.0.0.1, started from pyspark's own distribution
(``bin/spark-class``, no Spark download): one master and workers, each its own JVM, on free
ports, stopped by PID. Each worker starts its own executor JVM, which starts its own Python
workers with PYSPARK_PYTHON (this interpreter), so a data source, its options and its state
really cross process boundaries, as on a real cluster.

    from kipproducer.spark.standalone import Standalone
    with Standalone(Path("/tmp/cluster"), workers=2) as cluster:
        session = kip_spark.session(cluster.url, "app", {"spark.driver.host": "127.0.0.1"})

For trying ``format("kip")`` on a cluster without one, for the tests (tests/spark) and the
scaling benchmark (bench/side_by_side_spark.py --cluster-workers).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
#: Seconds a master or worker JVM gets to open its port (a loaded 2-core machine needs tens).
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: exited with {proc.returncode}: "
                               f"{log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{log.name}: port {port} not open after {timeout:.0f} s: "
                       f"{log.read_text()[-2000:]}")


class Standalone:
    """``with Standalone(work_dir, workers=2) as cluster:`` -> ``cluster.url``; logs and the
    workers' directories under ``work_dir``. ``workers`` is the list of the worker processes
    (each the leader of its own process group: ``os.killpg`` ends it with its executor)."""

    def __init__(self, work: Path, *, workers: int = 2, cores: int = 1,
                 memory: str = "1g", java_home: str | None = None) -> None:
        self.work = work
        self.count = workers
        self.cores = cores
        self.memory = memory
        self.env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1",
                        SPARK_LOG_DIR=str(work / "logs"))
        if java_home:
            self.env["JAVA_HOME"] = java_home
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.url = ""

    def _start(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.work / f"{name}.log"
        proc = subprocess.Popen(
            [str(Path(self.env["SPARK_HOME"], "bin", "spark-class")), *args],
            env=self.env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)  # its own group: the JVM and what it starts, killed as one
        return proc, log

    def _launch_worker(self) -> tuple[int, subprocess.Popen, Path]:
        i, port = len(self.workers), free_port()
        proc, log = self._start(
            f"worker{i}", WORKER, "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(free_port()), "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(self.work / f"worker{i}"), self.url)
        self.workers.append(proc)
        return port, proc, log

    def start(self) -> Standalone:
        self.work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.master, log = self._start("master", MASTER, "--host", "127.0.0.1", "--port",
                                       str(port), "--webui-port", str(free_port()))
        _wait_port(port, self.master, log, START_TIMEOUT_S)
        self.url = f"spark://127.0.0.1:{port}"
        started = [self._launch_worker() for _ in range(self.count)]  # JVMs side by side
        for wport, proc, log in started:
            _wait_port(wport, proc, log, START_TIMEOUT_S)
        return self

    def add_worker(self) -> subprocess.Popen:
        """One more worker (a replacement for one killed), started without waiting for it:
        it registers with the master, which gives running applications executors on it."""
        return self._launch_worker()[1]

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for proc in [*self.workers, self.master]:
            if proc is None:
                continue
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def __enter__(self) -> Standalone:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
