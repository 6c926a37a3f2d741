"""Suite-wide: a per-test time limit, for the test directories that start servers.

A directory turns it on by overriding the ``test_time_limit_s`` fixture in its conftest.py;
a test changes its own with ``@pytest.mark.time_limit(seconds)``. SIGALRM is delivered to the
main thread between bytecodes, so a hang fails its test instead of the whole run.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "time_limit(seconds): per-test time limit")


SPARK_TESTS = "tests/spark/"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How the README's ``pytest -n 2 --dist loadgroup`` shares the suite between two workers:
    a test file stays on one worker (its module fixtures, brokers among them, start once), the
    Spark tests share one worker (one SparkSession, and never two Spark drivers at once on a
    2-core machine), and they go first, being the longest group, so the other worker runs the
    rest meanwhile. Without xdist the groups are unused and only the order changes."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            path = item.nodeid.split("::", 1)[0]
            group = "spark" if path.startswith(SPARK_TESTS) else path
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: not item.nodeid.startswith(SPARK_TESTS))  # stable


@pytest.fixture
def test_time_limit_s() -> float | None:
    """Seconds a test may run; None: no limit (the default outside the server tests)."""
    return None


@pytest.fixture(autouse=True)
def _time_limit(request: pytest.FixtureRequest, test_time_limit_s: float | None) -> Iterator[None]:
    marker = request.node.get_closest_marker("time_limit")
    limit = marker.args[0] if marker else test_time_limit_s
    if (limit is None or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"test ran longer than {limit} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
