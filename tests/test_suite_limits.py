"""The suite's own machinery, as the README describes it: under the README's xdist command a
failure is named the moment it happens, and a test that hangs fails by name with its stack
after its time limit while the run goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

INNER = '''
import time

import pytest


def test_passes():
    pass


def test_fails():
    assert 1 == 2


@pytest.mark.timeout(2)
def test_hangs():
    time.sleep(600)


def test_after_the_hang():
    pass
'''


def test_failures_are_named_at_once_and_a_hang_fails_by_name(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's settings
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "-ra"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    progress, _, summary = out.partition("= FAILURES =")
    # Named as they happened, before the report of failures at the end.
    assert "FAILED test_inner.py::test_fails (call)" in progress, out[-3000:]
    assert "FAILED test_inner.py::test_hangs (call)" in progress, out[-3000:]
    assert "Timeout (>2.0s) from pytest-timeout" in summary, out[-3000:]
    assert "Stack of" in summary  # every thread's stack where the test hung
    assert out.rstrip().splitlines()[-1].startswith("2 failed, 2 passed"), out[-3000:]
