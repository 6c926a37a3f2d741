"""The suite's own machinery, as the README describes it: under the README's xdist command a
failure is named the moment it happens, a test that hangs fails by name with its stack after
its time limit while the run goes on, and a test file stays on one worker with every Spark
test on one worker (tests/conftest.py)."""

from __future__ import annotations

import re
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


GROUPED = """
def test_1():
    pass


def test_2():
    pass


def test_3():
    pass
"""


def test_a_file_stays_on_one_worker_and_the_spark_tests_share_one(tmp_path: Path) -> None:
    """--dist loadgroup with the groups tests/conftest.py gives: a pytest-xdist and pytest
    pair that loses them (pytest 9.2 with pytest-xdist 3.8 did, silently) fails here."""
    tests = tmp_path / "tests"
    (tests / "spark").mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("conftest.py"), tests / "conftest.py")
    files = ["spark/test_s1.py", "spark/test_s2.py", "test_a.py", "test_b.py", "test_c.py"]
    for name in files:
        (tests / name).write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, path in re.findall(r"^\[(gw\d+)\] .*?PASSED (tests/[\w/]+\.py)::", done.stdout,
                                   re.M):
        workers.setdefault(path, set()).add(worker)
    assert sorted(workers) == sorted(f"tests/{name}" for name in files), done.stdout[-3000:]
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["tests/spark/test_s1.py"] == workers["tests/spark/test_s2.py"], workers
