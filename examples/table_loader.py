"""A producer-group table loader: copies new rows of three tables into Kafka, exactly once.

Start one copy, then more, on one host or many: the producer group splits the tables among
the running copies (one table is one source partition), and when a copy stops the others take
its tables over from their last committed positions. Every copy needs its own
``transactional.id``: here ``db1-loader-<instance>``, the instance being the host name and the
process id unless ``--instance`` names it (a name kept across restarts ends the wait for an
unfinished transaction at the restart, docs/producer-groups.md).

The source is an SQLite file standing in for the application's database: each table has rows
``(seq INTEGER PRIMARY KEY, key TEXT, value TEXT)``, and a table's position is the last copied
``seq``. ``--fill N`` creates the tables with N rows each first.

    python examples/table_loader.py --bootstrap 127.0.0.1:9092 --db source.db --fill 5
    python examples/table_loader.py --bootstrap 127.0.0.1:9092 --db source.db   # a second copy

It prints one line when the tables it owns change ("owns: orders, invoices"), one per commit
("committed orders up to 5"), and stops cleanly on Ctrl-C or SIGTERM, committing what it sent
and leaving the group so the others take over at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import sys
import time

from confluent_kafka import KafkaException

from kipproducer import Producer

TABLES = ["orders", "customers", "invoices"]  # source partition i = TABLES[i]


def fill(db: str, rows: int) -> None:
    with sqlite3.connect(db) as conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                         "(seq INTEGER PRIMARY KEY, key TEXT, value TEXT)")
            for i in range(rows):
                conn.execute(f"INSERT INTO {table} (key, value) VALUES (?, ?)",
                             (f"{table}-{i}", f"{table} row {i}"))


def rows_after(conn: sqlite3.Connection, table: str, since: str | None) -> list[tuple]:
    """[(position, key, value)] of the rows after position ``since``, in order."""
    cursor = conn.execute(f"SELECT seq, key, value FROM {table} WHERE seq > ? ORDER BY seq "
                          "LIMIT 1000", (int(since or 0),))
    return [(str(seq), key.encode(), value.encode()) for seq, key, value in cursor]


def say(instance: str, text: str) -> None:
    print(f"loader {instance}: {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--db", required=True, help="the SQLite source file")
    parser.add_argument("--group", default="ProducerForDB1", help="the producer group")
    parser.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}",
                        help="this copy's name (default: host name and process id)")
    parser.add_argument("--fill", type=int, default=0, metavar="N",
                        help="first create the tables with N rows each")
    args = parser.parse_args(argv)
    if args.fill:
        fill(args.db, args.fill)
    conn = sqlite3.connect(args.db)
    me = args.instance

    positions: dict[int, str | None] = {}  # owned table -> committed position
    sent: dict[int, str] = {}  # owned table -> position sent, not committed yet
    stopping = False

    def show_owned() -> None:
        say(me, "owns: " + (", ".join(TABLES[p] for p in sorted(positions)) or "nothing"))

    def commit(producer: Producer) -> None:
        producer.commit_transaction(positions=dict(sent))  # rows and positions: all or nothing
        for part, position in sent.items():
            say(me, f"committed {TABLES[part]} up to {position}")
        positions.update(sent)
        sent.clear()
        if not stopping:
            producer.begin_transaction()

    def on_assign(producer: Producer, gained: dict) -> None:
        positions.update(gained)
        show_owned()

    def on_revoke(producer: Producer, gone: list) -> None:
        commit(producer)  # still owned here: commit what was sent
        for part in gone:
            positions.pop(part, None)
        show_owned()

    def on_lost(producer: Producer, gone: list) -> None:
        producer.abort_transaction()  # someone else owns them now: drop what was not committed
        sent.clear()
        producer.begin_transaction()
        for part in gone:
            positions.pop(part, None)
        show_owned()

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    p = Producer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                  "source.partition.count": len(TABLES), "session.timeout.ms": 10000,
                  "transactional.id": f"db1-loader-{me}"})
    try:
        p.init_transactions()
        p.begin_transaction()  # open before subscribe(): its callbacks commit or abort
        positions.update(p.subscribe(on_assign=on_assign, on_revoke=on_revoke,
                                     on_lost=on_lost))
        show_owned()
        while not stopping:
            for part in list(positions):
                since = sent.get(part, positions.get(part))
                for position, key, value in rows_after(conn, TABLES[part], since):
                    if part not in positions:
                        break  # revoked by a callback meanwhile
                    sent[part] = position  # first: see "Membership and callbacks"
                    p.produce(TABLES[part], value, key)  # callbacks may run in here
            try:
                if sent:
                    commit(p)
                else:
                    p.alive()  # idle: still a member
                    time.sleep(0.2)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    # e.g. another copy started with this transactional.id (fenced): this
                    # one is a zombie and can do nothing more
                    say(me, f"stopping: {error.name()}: {error.str()}")
                    stopping = True
                    return 1
                say(me, f"transaction aborted, sending again: {error.str()}")
                p.abort_transaction()  # a zombie's or a failed record's transaction
                sent.clear()
                p.begin_transaction()
        return 0
    finally:
        try:
            p.close()  # on_revoke commits what was sent; the group moves the tables at once
            say(me, "stopped")
        except KafkaException as exc:  # after a fatal error: nothing more to commit
            say(me, f"closed: {exc.args[0].str()}")
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
