"""examples/table_loader.py: two copies on one host split the three tables, and when one stops
the other takes its tables over; every row reaches Kafka exactly once (read_committed)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kipproducer.broker.embedded import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
LOADER = ROOT / "examples" / "table_loader.py"
TABLES = ["orders", "customers", "invoices"]


class Copy:
    """One running copy of the loader; its stdout lines collected by a thread."""

    def __init__(self, bootstrap: str, db: Path, instance: str, *extra: str) -> None:
        self.instance = instance
        self.proc = subprocess.Popen(
            [sys.executable, str(LOADER), "--bootstrap", bootstrap, "--db", str(db),
             "--instance", instance, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr),
                         daemon=True).start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def owned(self) -> list[str] | None:
        """The tables of its last "owns:" line (None before the first)."""
        for line in reversed(self.lines):
            if " owns: " in line:
                text = line.split(" owns: ", 1)[1]
                return [] if text == "nothing" else text.split(", ")
        return None

    def committed(self, table: str) -> int:
        ups = [int(line.rsplit(" ", 1)[1]) for line in self.lines
               if f" committed {table} up to " in line]
        return max(ups, default=0)

    def describe(self) -> str:
        return (f"{self.instance} (exit {self.proc.poll()}):\n  " + "\n  ".join(self.lines)
                + "\n  stderr: " + "\n  ".join(self.stderr[-20:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise


def wait_for(what: str, predicate, copies: list[Copy], timeout: float = 45) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"not within {timeout} s: {what}\n" + "\n".join(c.describe() for c in copies))


def add_rows(db: Path, start: int, count: int) -> None:
    with sqlite3.connect(db) as conn:
        for table in TABLES:
            for i in range(start, start + count):
                conn.execute(f"INSERT INTO {table} (key, value) VALUES (?, ?)",
                             (f"{table}-{i}", f"{table} row {i}"))


def read_committed(bootstrap: str, table: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{table}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    keys: list[bytes] = []
    try:
        consumer.subscribe([table])
        deadline = time.monotonic() + 30
        while len(keys) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is None:
                    keys.append(msg.key())
        for msg in consumer.consume(100, timeout=1.0):  # nothing more: no duplicates
            if msg.error() is None:
                keys.append(msg.key())
    finally:
        consumer.close()
    return keys


def test_two_copies_split_the_tables_and_one_takes_over(tmp_path: Path) -> None:
    db = tmp_path / "source.db"
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        a = Copy(bootstrap, db, "a", "--fill", "4")
        copies = [a]
        try:
            wait_for("copy a owns the three tables and commits 4 rows of each",
                     lambda: sorted(a.owned() or []) == sorted(TABLES)
                     and all(a.committed(t) == 4 for t in TABLES), copies)
            b = Copy(bootstrap, db, "b")
            copies.append(b)
            wait_for("the two copies split the tables",
                     lambda: bool(a.owned()) and bool(b.owned())
                     and sorted(a.owned() + b.owned()) == sorted(TABLES), copies)
            add_rows(db, 4, 2)
            wait_for("rows 5 and 6 of every table committed, by either copy",
                     lambda: all(max(a.committed(t), b.committed(t)) == 6 for t in TABLES),
                     copies)
            b_tables = b.owned()
            assert all(b.committed(t) == 6 for t in b_tables), b.describe()
            assert b.stop() == 0, b.describe()
            assert b.lines[-1] == "loader b: stopped", b.describe()
            wait_for("copy a takes copy b's tables over",
                     lambda: sorted(a.owned() or []) == sorted(TABLES), copies, timeout=30)
            add_rows(db, 6, 2)
            wait_for("copy a commits rows 7 and 8 of every table",
                     lambda: all(a.committed(t) == 8 for t in TABLES), copies)
        finally:
            for copy in copies:
                copy.stop()
        assert a.proc.returncode == 0, a.describe()
        for table in TABLES:
            keys = read_committed(bootstrap, table, 8)
            assert sorted(keys) == sorted(f"{table}-{i}".encode() for i in range(8)), (
                table, keys)


def test_a_second_copy_with_the_same_instance_fences_the_first_with_one_line(
        tmp_path: Path) -> None:
    """The worked example's old failure: two copies with one transactional.id. The first is
    fenced and says so in one line, then exits 1 (no traceback); the second loads the rows."""
    db = tmp_path / "source.db"
    with EmbeddedBroker() as broker:
        first = Copy(broker.bootstrap_servers, db, "same", "--fill", "2")
        copies = [first]
        try:
            wait_for("the first copy commits", lambda: first.committed("orders") == 2, copies)
            second = Copy(broker.bootstrap_servers, db, "same")
            copies.append(second)
            wait_for("the second copy owns a table", lambda: bool(second.owned()), copies)
            add_rows(db, 2, 1)  # the first copy's next commit is refused
            wait_for("the first copy stops, fenced", lambda: first.proc.poll() is not None,
                     copies)
            assert first.proc.returncode == 1, first.describe()
            stopping = [line for line in first.lines if "stopping:" in line]
            assert len(stopping) == 1 and "fenced" in stopping[0].lower(), first.describe()
            assert not any("Traceback" in line for line in first.stderr), first.describe()
            wait_for("the second copy owns every table and loads row 3",
                     lambda: all(second.committed(t) == 3 for t in TABLES), copies)
        finally:
            for copy in copies:
                copy.stop()
        assert second.proc.returncode == 0, second.describe()
