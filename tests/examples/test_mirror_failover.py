"""examples/mirror_failover.py: a group that read part of a topic on the source carries on on
the target after the mirror, with no record skipped or read twice."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from kipproducer.broker.embedded import EmbeddedBroker

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "mirror_failover.py"


def test_the_group_carries_on_on_the_target() -> None:
    with EmbeddedBroker() as source, EmbeddedBroker() as target:
        p = Producer({"bootstrap.servers": source.bootstrap_servers})
        for i in range(10):
            p.produce("orders", f"order {i}".encode(), f"o-{i}".encode(), partition=0)
        assert p.flush(10) == 0
        # the application read the first 6 records on the source and committed
        c = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": "billing",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        got = []
        c.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += [m for m in c.consume(6 - len(got), timeout=0.5) if not m.error()]
        assert [m.offset() for m in got] == list(range(6))
        c.commit(asynchronous=False)
        c.close()

        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--source", source.bootstrap_servers,
             "--target", target.bootstrap_servers, "--topics", "orders", "--group", "billing",
             "--idle-exit", "3"],
            capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.splitlines() == [
            "mirrored 10 records",
            *(f"orders[0]@{i} key=o-{i}" for i in range(6, 10)),
            "the group read 4 records on the target",
        ], done.stdout
