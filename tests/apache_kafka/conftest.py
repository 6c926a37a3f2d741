"""Fixtures for the tests on a real Apache Kafka (the release kafka_jars.KAFKA_VERSION names):

* ``kafka3``: 3 combined KRaft nodes, replication factor 3, ``min.insync.replicas=2``,
  ``transaction.version`` 2 (Kafka 4.x's default); one cluster for the whole test session
  (the files share one xdist worker, tests/conftest.py), each test on fresh topics. After
  every test a node left down is started again and every partition is back in sync, so a test
  that kills a node and fails cannot leave the next one a broken cluster.
* ``kafka1_tv0``: 1 node formatted with ``transaction.version=0`` (the classic transaction
  protocol, what a 3.x cluster speaks), per module.
* ``kafka1_secured``: 1 node with TLS and SASL listeners besides the plaintext one, per module.

Without Java or Maven (and no cached jars) the tests skip with one line naming what is
missing; under ``CI=true`` that is an error instead, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# the paced loads and their judge (lost / duplicated / reordered), shared with the mock
# cluster's tests
sys.path.insert(0, str(HERE.parent / "cluster"))
# the producer-group kill -9 scenario, shared with the reference broker's test
sys.path.insert(0, str(HERE.parent / "producer"))
# the emulated KIP-27 race, shared with the stand-in's test
sys.path.insert(0, str(HERE.parent / "kip"))
# the Spark sink and source through a kill -9, shared with the reference broker's test (and
# the log-end readers it uses)
sys.path.insert(0, str(HERE.parent / "spark"))
sys.path.insert(0, str(HERE.parent / "mirror"))

import kafka_jars  # noqa: E402
from kafka_cluster import KafkaCluster  # noqa: E402


def _start(root: Path, nodes: int, **kw) -> KafkaCluster:
    kafka_jars.require_in_tests()
    cluster = KafkaCluster(root, nodes, **kw)
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _start(tmp_path_factory.mktemp("kafka3"), 3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _cluster_healed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "kafka3" not in request.fixturenames:
        return
    cluster: KafkaCluster = request.getfixturevalue("kafka3")
    down = [i for i, node in cluster.nodes.items() if not node.alive]
    for node_id in down:
        cluster.restart(node_id, wait_in_sync=False)
    if down:
        cluster.wait_in_sync()


@pytest.fixture(scope="module")
def kafka1_tv0(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = _start(tmp_path_factory.mktemp("kafka1-tv0"), 1, transaction_version=0)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def kafka1_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """1 node with an SSL listener (PEM keystores from a trustme CA) and a SASL_PLAINTEXT one
    (PLAIN, SCRAM-SHA-256/512 users made at format time, unsecured OAUTHBEARER)."""
    cluster = _start(tmp_path_factory.mktemp("kafka1-secured"), 1, tls=True, sasl=True)
    try:
        yield cluster
    finally:
        cluster.close()


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """A failed test on Apache Kafka shows the end of every node's log."""
    if call.excinfo is None or call.when != "call":
        return
    for name in ("kafka3", "kafka1", "kafka1_tv0", "kafka1_secured"):
        cluster = getattr(item, "funcargs", {}).get(name)
        if isinstance(cluster, KafkaCluster):
            for node_id in cluster.nodes:
                item.add_report_section("call", f"{name} node {node_id}",
                                        cluster.log_tail(node_id))


@pytest.fixture(scope="module")
def kafka1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """1 node, Kafka 4.x's defaults (``transaction.version`` 2), per module: the reference
    the conformance tests compare ``kip broker`` with."""
    cluster = _start(tmp_path_factory.mktemp("kafka1"), 1)
    try:
        yield cluster
    finally:
        cluster.close()
