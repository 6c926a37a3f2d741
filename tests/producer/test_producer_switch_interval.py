"""kip.switch.interval.ms: the engine's start lowers Python's thread switch interval (so the
sender thread gets the interpreter lock soon after asking), never raises it, and leaves it
alone at 0. Each case runs in its own process: the interval is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASE = """
import sys
from kipproducer import Producer
sys.setswitchinterval({before})
p = Producer({{"bootstrap.servers": "{bootstrap}", **{extra}}})
p.produce_batch("switch-interval", [{{"value": b"v", "partition": 0}}])
assert p.flush(30) == 0
print(sys.getswitchinterval())
"""


@pytest.mark.parametrize(("before", "extra", "after"), [
    (0.005, {}, 0.0005),  # Python's default, lowered to the default 0.5 ms
    (0.005, {"kip.switch.interval.ms": 2}, 0.002),
    (0.005, {"kip.switch.interval.ms": 0}, 0.005),  # left alone
    (0.0001, {}, 0.0001),  # never raised
])
def test_the_engines_start_sets_the_interval(embedded, before, extra, after):
    broker = embedded({"num.partitions": 1})
    run = subprocess.run([sys.executable, "-c", CASE.format(
        before=before, bootstrap=broker.bootstrap_servers, extra=extra)],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) == pytest.approx(after)
