"""The broker as a user runs it, and client helpers, for the broker integration tests.

:class:`KipBroker` runs ``python -m kipproducer broker --listen 127.0.0.1:0 --data-dir DIR
--config k=v ...`` as a subprocess, reads the port from its first stdout line and keeps its
stderr in a file. The subprocess must run the same kipproducer as the tests: an installed
package is used when a plain ``python -c "import kipproducer.broker"`` finds the very package
the tests import; otherwise the checkout's ``src`` (found from this file's location) goes on
PYTHONPATH. The check matters: an older installed copy without the broker can sit in
site-packages while the tests run from the source tree.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kipproducer

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


# -- running the broker as a subprocess ---------------------------------------------------------


def _same_package_without_help() -> bool:
    """Does a plain subprocess (no PYTHONPATH) import the broker from the package we test?"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import kipproducer.broker.broker, kipproducer as k; print(k.__file__)",
            ],
            env=env,
            cwd="/",  # not the checkout: its src must not be found by accident
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return False
    if out.returncode != 0:
        return False
    return Path(out.stdout.strip()).resolve() == Path(kipproducer.__file__).resolve()


_ENV: dict[str, str] | None = None


def broker_env() -> dict[str, str]:
    """The environment the broker subprocess runs with (computed once per session)."""
    global _ENV
    if _ENV is None:
        env = dict(os.environ)
        if not _same_package_without_help():
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p
            )
        # The broker's own Python output must not be buffered away if it dies.
        env["PYTHONUNBUFFERED"] = "1"
        _ENV = env
    return _ENV


class BrokerStartError(RuntimeError):
    pass


class KipBroker:
    """One broker subprocess; ``restart()`` reuses the data dir (the port may change)."""

    def __init__(
        self,
        data_dir: Path,
        config: Mapping[str, Any],
        stderr_path: Path,
        *,
        allow_tracebacks: bool = False,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.wrapper = list(wrapper)  # a command the broker runs under (fiu-run -x)
        self.config = {k: str(v) for k, v in config.items()}
        self.stderr_path = stderr_path
        self.allow_tracebacks = allow_tracebacks
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.starts = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, port: int = 0) -> KipBroker:
        """Start (again) on the data dir; port 0: any free port, else exactly ``port``."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        args = [
            *self.wrapper,
            sys.executable,
            "-m",
            "kipproducer",
            "broker",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(self.data_dir),
        ]
        for key, value in self.config.items():
            args += ["--config", f"{key}={value}"]
        with open(self.stderr_path, "ab") as err:
            err.write(b"==== start %d: %s\n" % (self.starts, " ".join(args).encode()))
            err.flush()
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=broker_env(),
                bufsize=0,
            )
        line = self._first_line(self.proc)
        prefix = "listening on "
        if not line.startswith(prefix):
            self.kill()
            raise BrokerStartError(f"unexpected first line {line!r}\n{self.stderr_tail()}")
        host, _, port = line[len(prefix) :].rpartition(":")
        self.host, self.port = host, int(port)
        # Drain stdout for the rest of the broker's life so a stray print can never block it.
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
        return self

    def _first_line(self, proc: subprocess.Popen[bytes]) -> str:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise BrokerStartError(
                        f"no 'listening on' line within {START_TIMEOUT_S} s\n{self.stderr_tail()}"
                    )
                if not sel.select(min(left, 0.5)):
                    continue
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    proc.wait(5)
                    raise BrokerStartError(
                        f"broker exited with {proc.returncode} before listening\n"
                        f"{self.stderr_tail()}"
                    )
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    @staticmethod
    def _drain(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            while proc.stdout.read(4096):
                pass

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (a clean shutdown: logs flushed and closed); SIGKILL on timeout."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise AssertionError(
                f"broker pid {proc.pid} ignored SIGTERM for {timeout} s\n{self.stderr_tail()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL: the process dies wherever it is (nothing flushed on its way out)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def restart(self, same_port: bool = False) -> KipBroker:
        """SIGTERM, then start on the same data dir (and on the same port if asked)."""
        self.stop()
        return self.start(self.port if same_port else 0)

    # -- what tests look at -------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stderr_tail(self, lines: int = 60) -> str:
        text = self.stderr_text().splitlines()[-lines:]
        return "---- broker stderr (%s) ----\n%s" % (self.stderr_path, "\n".join(text))

    def wait_for_log(self, needle: str, timeout: float = 10.0, start: int = 0) -> str:
        """Wait until the broker's stderr (from character ``start``) holds ``needle``."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.stderr_text()[start:]
            if needle in text:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"broker never logged {needle!r}\n{self.stderr_tail()}")
            time.sleep(0.05)

    def __repr__(self) -> str:
        return f"KipBroker({self.bootstrap}, pid={self.proc and self.proc.pid})"


class BrokerFactory:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.brokers: list[KipBroker] = []

    def __call__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        data_dir: Path | None = None,
        allow_tracebacks: bool = False,
        wrapper: Sequence[str] = (),
    ) -> KipBroker:
        n = len(self.brokers)
        broker = KipBroker(
            data_dir or self.base / f"broker{n}-data",
            dict(config or {}),
            self.base / f"broker{n}.stderr.log",
            allow_tracebacks=allow_tracebacks,
            wrapper=wrapper,
        )
        self.brokers.append(broker)
        return broker.start()

    def close(self) -> None:
        problems = []
        for broker in self.brokers:
            if broker.proc is None:
                continue
            if broker.alive:
                try:
                    code = broker.stop()
                except AssertionError as exc:
                    problems.append(str(exc))
                else:
                    if code != 0:  # SIGTERM is a clean shutdown: exit status 0
                        problems.append(f"broker {broker} exited with {code} on SIGTERM")
            text = broker.stderr_text()
            if "Traceback" in text and not broker.allow_tracebacks:
                problems.append(f"broker {broker} logged a traceback\n{broker.stderr_tail(120)}")
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)


# -- client helpers ------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create ``{name: partitions}`` (replication factor 1) and wait for every result."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, n, 1, config=dict(config or {})) for name, n in topics.items()],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    for future in futures.values():
        future.result(timeout)


@dataclass(frozen=True)
class Rec:
    """A consumed record, as plain values (confluent's Message objects can't be compared)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    @classmethod
    def of(cls, msg: Any) -> Rec:
        return cls(
            msg.topic(),
            msg.partition(),
            msg.offset(),
            msg.key(),
            msg.value(),
            tuple(msg.headers() or ()),
            msg.timestamp()[1],
        )


def consume_records(
    bootstrap: str,
    topic: str,
    n: int,
    *,
    partitions: int | None = None,
    timeout: float = 30.0,
    config: Mapping[str, Any] | None = None,
    start: int = OFFSET_BEGINNING,
) -> list[Rec]:
    """Read exactly ``n`` records of ``topic`` from ``start`` (no group: assign), or fail.

    Waits a moment after the n-th record for any extra one, so too many records fail too.
    """
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": unique("reader"),  # required by the client; nothing is committed
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "check.crcs": True,
        **(config or {}),
    }
    consumer = Consumer(conf)
    try:
        if partitions is None:
            meta = consumer.list_topics(topic, timeout=timeout)
            partitions = len(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"consumed {len(out)} of {n} records of {topic} in {timeout} s"
                )
            for msg in consumer.consume(min(n - len(out), 10_000), timeout=min(left, 1.0)):
                err = msg.error()
                if err is not None:
                    raise AssertionError(f"consumer error on {topic}: {err}")
                out.append(Rec.of(msg))
        extra = consumer.consume(100, timeout=0.3)
        assert not [m for m in extra if m.error() is None], "more records than expected"
        return out
    finally:
        consumer.close()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
