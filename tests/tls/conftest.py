"""Fixtures of the TLS tests: certificates made for the session, brokers with TLS listeners."""

from __future__ import annotations

from pathlib import Path

import pytest
from tls_support import Certs, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


