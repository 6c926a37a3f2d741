"""One producer-group member process for test_producer_groups_kill.py.

    python groups_worker.py BOOTSTRAP GROUP MODE TOPIC COUNT TOTAL NAME STOP_FILE [idempotent]

Loads a deterministic source: source partition p is the sequence 0..TOTAL-1; each record goes
to partition p of TOPIC with value ``p:seq:NAME:generation`` and the position is the last seq
sent. MODE is ``transactional`` (records and positions in one transaction) or
``at-least-once`` (commit_positions after the records; ``idempotent``: with
enable.idempotence). Runs until STOP_FILE exists.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from kipproducer import Producer
from kipproducer.engine.group_metadata import parse_group_metadata

STEP = 10          # records per source partition between two commits
PAUSE_S = 0.08     # between two commits: a source partition's 400 records take ~4 s


def main() -> int:
    # The group's decisions in the member's log (shown when the test fails).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    bootstrap, group, mode, topic, count, total, name, stop_file = sys.argv[1:9]
    count, total = int(count), int(total)
    conf = {"bootstrap.servers": bootstrap, "group.id": group,
            "source.partition.count": count, "session.timeout.ms": 6000,
            "max.alive.interval.ms": 8000, "client.id": name, "linger.ms": 2}
    txn = mode == "transactional"
    if sys.argv[9:] == ["idempotent"]:
        conf["enable.idempotence"] = True
    if txn:
        conf["transactional.id"] = f"{group}-{name}"
        conf["transaction.timeout.ms"] = 10_000  # a killed member's transaction: aborted soon
    p = Producer(conf)
    positions: dict[int, str | None] = {}   # owned source partition -> committed position
    sent: dict[int, str] = {}               # sent since the last commit
    stopping = False

    def commit(producer) -> None:
        if txn:
            producer.commit_transaction(positions=dict(sent))
        else:
            producer.commit_positions(dict(sent))
        positions.update({k: v for k, v in sent.items() if k in positions})
        sent.clear()
        if txn:
            producer.begin_transaction()

    def on_assign(producer, gained):
        print(f"{name}: assigned {gained}", flush=True)
        positions.update(gained)

    def on_revoke(producer, gone):
        print(f"{name}: revoked {gone}, sent {sent}", flush=True)
        if sent and not stopping:  # (none before the first begin_transaction: subscribe())
            commit(producer)    # still owned during the call: what was sent goes with its positions
        for part in gone:
            positions.pop(part, None)

    def on_lost(producer, gone):
        print(f"{name}: lost {gone}, sent {sent}", flush=True)
        if txn:             # owned by others now: nothing of this transaction may commit
            producer.abort_transaction()
            producer.begin_transaction()
            sent.clear()
        for part in gone:
            sent.pop(part, None)
            positions.pop(part, None)

    if txn:  # open before subscribe(): its callbacks may commit or abort
        p.init_transactions()
        p.begin_transaction()
    positions.update(p.subscribe(on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost))
    print(f"{name} started", flush=True)
    while not os.path.exists(stop_file):
        generation = parse_group_metadata(p._group.group_metadata()).generation_id
        for part in sorted(positions):
            if part not in positions:
                continue
            pos = sent.get(part, positions[part])
            start = int(pos) + 1 if pos is not None else 0
            for seq in range(start, min(start + STEP, total)):
                if part not in positions:
                    break   # revoked or lost by a callback inside produce()
                # The position first: callbacks run inside produce() after the record is
                # appended, and an on_revoke there commits it with the record.
                sent[part] = str(seq)
                p.produce(topic, f"{part}:{seq}:{name}:{generation}".encode(),
                          str(part).encode(), partition=part)
        try:
            if sent:
                began = time.monotonic()
                commit(p)
                if time.monotonic() - began > 1:
                    print(f"{name}: commit took {time.monotonic() - began:.1f} s", flush=True)
            else:
                p.alive()
                time.sleep(0.05)
        except Exception as exc:  # lost partitions meanwhile: go on with what is owned
            print(f"{name}: {exc}", flush=True)
            owned = p.alive()
            if txn:  # nothing of the transaction stays: start again from the committed
                p.abort_transaction()
                sent.clear()
            for part in set(sent) - set(owned):
                del sent[part]
            positions.clear()
            positions.update(owned)
            if txn:
                p.begin_transaction()
        time.sleep(PAUSE_S)
    stopping = True
    if txn:
        p.abort_transaction()
    p.close()
    print(f"{name} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
