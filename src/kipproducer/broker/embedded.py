"""EmbeddedBroker: the reference broker in a background thread of this process.

    with EmbeddedBroker() as broker:           # a temporary data dir, a free port
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs its own asyncio loop in a daemon thread; ``close()`` (or leaving the ``with``
block) stops it cleanly: connections closed, logs flushed and closed, and a temporary data dir
removed. Give ``data_dir`` to keep the data across restarts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from .broker import Broker


class EmbeddedBroker:
    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        config: Mapping[str, Any] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self._temporary = data_dir is None
        self.data_dir = (
            tempfile.mkdtemp(prefix="kip-broker-") if data_dir is None else os.fspath(data_dir)
        )
        self._loop = asyncio.new_event_loop()
        self.broker = Broker(self.data_dir, host=host, port=port, config=config)
        self._thread = threading.Thread(target=self._run, name="kip-embedded-broker", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._thread.start()
        if not self._started.wait(start_timeout):
            raise TimeoutError(f"embedded broker did not start within {start_timeout} s")
        if self._error is not None:
            self._thread.join()
            self._cleanup_dir()
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.broker.start())
        except BaseException as exc:  # surfaced to the constructor's caller
            self._error = exc
            self._started.set()
            self._loop.close()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.broker.stop())
        self._loop.close()

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def listener_address(self, protocol: str) -> str:
        """``host:port`` of the listener of that protocol (``listeners=SSL://127.0.0.1:0``)."""
        return self.broker.listener_address(protocol)

    @property
    def host(self) -> str:
        return self.broker.advertised_host

    @property
    def port(self) -> int:
        return self.broker.advertised_port

    def call(self, fn, *args, timeout: float = 30.0):
        """Run ``fn(broker, *args)`` on the broker's loop (for tests and tools)."""

        async def run():
            return fn(self.broker, *args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(60)
        self._cleanup_dir()

    def _cleanup_dir(self) -> None:
        if self._temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedBroker({self.bootstrap_servers}, data_dir={self.data_dir!r})"
