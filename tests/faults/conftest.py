"""Fixtures for the broker fault tests (helpers live in fault_support.py).

The broker runs as a subprocess, as in tests/integration (whose ``integration_support`` these
tests share), and the faults are real: files edited while it is down, a tmpfs filled to
ENOSPC, libfiu's failures injected into its system calls while it runs.
"""

from __future__ import annotations

import gc
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
for _helpers in (_TESTS / "integration", _TESTS / "kip"):
    if str(_helpers) not in sys.path:
        sys.path.insert(0, str(_helpers))

from integration_support import BrokerFactory  # noqa: E402


@pytest.fixture
def kip_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Factory: ``kip_broker(config={...})`` -> a started KipBroker, stopped at teardown."""
    factory = BrokerFactory(tmp_path)
    yield factory
    for broker in factory.brokers:
        print(broker.stderr_tail(40))  # shown when the test failed
    factory.close()


@pytest.fixture
def fiu() -> list[str]:
    """The command prefix that runs the broker under libfiu with remote control (turn its
    failure points on and off with ``fault_support.fail``)."""
    if shutil.which("fiu-run") is None or shutil.which("fiu-ctrl") is None:
        pytest.skip("libfiu's fiu-run / fiu-ctrl are not installed (apt-get install fiu-utils)")
    return ["fiu-run", "-x"]


@pytest.fixture(autouse=True)
def _release_clients() -> Iterator[None]:
    """Destroy the test's librdkafka clients now, so none keeps reconnecting to a stopped
    broker."""
    yield
    gc.collect()
