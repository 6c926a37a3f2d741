"""`kip broker` freezes what it holds once started (server.freeze_startup_objects), so Python's
full collections walk only what requests create: a full pass over the started broker's own
objects stops the event loop for 40-50 ms on the machine the benchmarks run on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PRODUCER_TESTS = str(Path(__file__).resolve().parents[1] / "producer")
if _PRODUCER_TESTS not in sys.path:
    sys.path.insert(0, _PRODUCER_TESTS)

from producer_support import KipProcess  # noqa: E402

# Loaded by the broker process at startup (Python imports sitecustomize from sys.path): at
# exit it writes how many objects the collector keeps frozen.
SITECUSTOMIZE = """
import atexit, gc, os
def _report():
    with open(os.environ["KIP_TEST_FROZEN_FILE"], "w") as out:
        out.write(str(gc.get_freeze_count()))
atexit.register(_report)
"""


def test_started_broker_keeps_its_objects_out_of_full_collections(tmp_path, monkeypatch):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    report = tmp_path / "frozen.txt"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("KIP_TEST_FROZEN_FILE", str(report))
    broker = KipProcess(tmp_path / "data", 0).start()
    assert broker.stop() == 0, broker.log_tail()
    # The modules and protocol tables of a started broker: tens of thousands of objects.
    assert int(report.read_text()) > 10_000
