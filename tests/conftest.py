"""Suite-wide: how the two xdist workers share the tests, and every test's time limit.

Every test gets a pytest-timeout limit (setup, call and teardown together): the directory's
from ``TIME_LIMITS_S`` below, or ``DEFAULT_TIME_LIMIT_S``; a test sets its own with
``@pytest.mark.timeout(seconds)``. pytest-timeout's signal method raises in the test's thread
and dumps every thread's stack, so a hang fails that test by name and the run goes on.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kipproducer.broker.embedded import EmbeddedBroker

SPARK_TESTS = "tests/spark/"
# Apache Kafka's tests share one worker too: one 3-node cluster (three JVMs) at a time.
APACHE_KAFKA_TESTS = "tests/apache_kafka/"
CHILD_STARTUP = Path(__file__).with_name("child_startup")

# Seconds per test by directory; the longest tests carry their own marker.
TIME_LIMITS_S = {
    "tests/apache_kafka/": 300,
    "tests/broker/": 60,
    "tests/cluster/": 180,
    "tests/docs/": 120,
    "tests/examples/": 180,
    "tests/integration/": 60,
    "tests/kip/": 120,
    "tests/mirror/": 120,
    "tests/producer/": 120,
    "tests/security/": 120,
    "tests/spark/": 600,  # a driver killed and restarted: up to 213 s on a loaded machine
    "tests/tls/": 120,
}
DEFAULT_TIME_LIMIT_S = 120


def time_limit_s(nodeid: str) -> float:
    for directory, limit in TIME_LIMITS_S.items():
        if nodeid.startswith(directory):
            return limit
    return DEFAULT_TIME_LIMIT_S


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How the README's ``pytest -n 2 --dist loadgroup`` shares the suite between two workers:
    a test file stays on one worker (its module fixtures, brokers among them, start once), the
    Spark tests share one worker (one SparkSession, and never two Spark drivers at once on a
    2-core machine), Apache Kafka's tests share one (one cluster of JVMs at a time), and the
    two go first, being the longest groups. Without xdist the groups are unused and only the
    order changes."""
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(time_limit_s(item.nodeid)))
        if item.get_closest_marker("xdist_group") is None:
            path = item.nodeid.split("::", 1)[0]
            group = ("spark" if path.startswith(SPARK_TESTS) else
                     "apache-kafka" if path.startswith(APACHE_KAFKA_TESTS) else path)
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_first_the_longest)  # stable


def _first_the_longest(item: pytest.Item) -> int:
    """The two longest groups first (Spark, then Apache Kafka's), so each has a worker to
    itself early and the other tests fill in around them."""
    if item.nodeid.startswith(SPARK_TESTS):
        return 0
    return 1 if item.nodeid.startswith(APACHE_KAFKA_TESTS) else 2


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a failure the moment it happens, not only in the summary at the end: with ``-q``
    a failure is otherwise one ``F`` among thousands of dots until the run finishes."""
    if report.failed:
        config = _config
        if config is None or hasattr(config, "workerinput"):  # xdist worker: the controller prints
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            nodeid = report.nodeid
            if nodeid.rfind("@") > nodeid.rfind("]"):  # loadgroup's "@group" suffix
                nodeid = nodeid[:nodeid.rfind("@")]
            reporter.write_line(f"\nFAILED {nodeid} ({report.when})", red=True)


_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config
    # Processes a test launches start without hypothesis (see child_startup/sitecustomize.py).
    # Not the xdist controller's: its children are the workers, which run hypothesis tests.
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        paths = [str(CHILD_STARTUP), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


@pytest.fixture
def embedded() -> Iterator[Any]:
    """Factory: ``embedded(config)`` -> a started EmbeddedBroker, closed after the test."""
    started: list[EmbeddedBroker] = []

    def start(config: dict[str, Any] | None = None, **kw: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(config=config, **kw)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.close()


@pytest.fixture
def dead_address() -> str:
    """127.0.0.1 and a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"
