"""Transactional consume-produce: read a topic, write each record transformed to another, and
commit the consumer's offsets in the same transaction (docs/transactions.md).

    python examples/consume_produce.py --bootstrap 127.0.0.1:9092 --input orders \\
        --output orders-enriched --idle-exit 5

A new group starts at the topic's beginning (``auto.offset.reset=earliest``); a rerun starts
where the last committed transaction left off, so each input record is written once. It prints
one line per transaction ("committed 3 records") and, when it stops (Ctrl-C, SIGTERM, or
``--idle-exit`` seconds without records), "enriched N records". The consumer is closed on the
way out, so a rerun joins the group at once instead of waiting for the old member's session.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer

from kipproducer import Producer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--input", default="orders", help="the topic read")
    parser.add_argument("--output", default="orders-enriched", help="the topic written")
    parser.add_argument("--group", default="enricher", help="the consumer group")
    parser.add_argument("--transactional-id", default="enricher-1",
                        help="one per running copy (a second copy with it fences the first)")
    parser.add_argument("--idle-exit", type=float, default=0, metavar="S",
                        help="stop after S seconds without records (default: run until stopped)")
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": args.transactional_id})
    enriched = 0
    try:
        consumer.subscribe([args.input])
        producer.init_transactions()
        last_record = time.monotonic()
        while not stopping:
            records = [r for r in consumer.consume(1000, timeout=0.5) if not r.error()]
            if not records:
                if args.idle_exit and time.monotonic() - last_record > args.idle_exit:
                    break
                continue
            last_record = time.monotonic()
            producer.begin_transaction()
            for r in records:
                producer.produce(args.output, (r.value() or b"").upper(), r.key())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata())
            producer.commit_transaction()  # the records and the consumer's offsets, together
            enriched += len(records)
            print(f"committed {len(records)} records", flush=True)
    finally:
        consumer.close()
        producer.flush(10)
    print(f"enriched {enriched} records", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
