"""Fixtures for the multi-broker tests: ``mock_cluster``, a 3-broker librdkafka mock cluster
in its own subprocess (tests/cluster/mock_cluster.py), stopped by PID at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mock_cluster import MockCluster


@pytest.fixture
def mock_cluster(tmp_path: Path) -> Iterator[MockCluster]:
    cluster = MockCluster(3, log_path=tmp_path / "mock_cluster.log")
    try:
        yield cluster
    finally:
        rc = cluster.close()
        assert rc == 0, f"the mock cluster subprocess ended with {rc}"
