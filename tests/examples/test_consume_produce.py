"""examples/consume_produce.py: every input record is written once, transformed, and a rerun
starts after the committed offsets (writes nothing again)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from kipproducer.broker.embedded import EmbeddedBroker

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "consume_produce.py"


def run(bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--bootstrap", bootstrap,
                           "--idle-exit", "3"], capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)


def read(bootstrap: str, topic: str, want: int) -> list[tuple[bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    got: list[tuple[bytes, bytes]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < want:
            got += [(m.key(), m.value()) for m in c.consume(100, timeout=0.5) if not m.error()]
        got += [(m.key(), m.value()) for m in c.consume(100, timeout=1.0) if not m.error()]
    finally:
        c.close()
    return got


def test_each_record_once_and_a_rerun_writes_nothing_again() -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            p.produce("orders", f"order {i}".encode(), f"o-{i}".encode())
        assert p.flush(10) == 0
        first = run(bootstrap)
        assert first.returncode == 0, first.stderr[-3000:]
        assert first.stdout.splitlines()[-1] == "enriched 5 records", first.stdout
        second = run(bootstrap)
        assert second.returncode == 0, second.stderr[-3000:]
        assert second.stdout.splitlines() == ["enriched 0 records"], second.stdout
        assert sorted(read(bootstrap, "orders-enriched", 5)) == [
            (f"o-{i}".encode(), f"ORDER {i}".encode()) for i in range(5)]
