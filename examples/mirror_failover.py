"""Consumer failover to a mirror: copy topics with every offset kept (preserve mode), with the
consumer groups' committed offsets, then let a group carry on on the target (docs/mirror.md).

    python examples/mirror_failover.py --source 127.0.0.1:9092 --target 127.0.0.1:9093 \\
        --topics orders --group billing

The copy runs once (``Mirror.run(once=True)``: until every partition has caught up with the
source) and prints "mirrored N records". Because each record keeps its offset, the group's
source offsets are valid on the target as they are; the mirror copies them at the end of the
run. The script then joins ``--group`` on the target, as the failed-over application would,
prints one line per record it gets ("orders[0]@6 key=o-6") and, after ``--idle-exit`` seconds
without records, "the group read N records on the target". Consumers and the mirror's clients
are closed on the way out.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Consumer

from kipproducer.mirror import Mirror


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default="127.0.0.1:9092", help="the source cluster")
    parser.add_argument("--target", default="127.0.0.1:9093", help="the target cluster")
    parser.add_argument("--topics", default="orders", help="a regular expression of topics")
    parser.add_argument("--group", default="billing", help="the consumer group that fails over")
    parser.add_argument("--idle-exit", type=float, default=3.0, metavar="S",
                        help="stop reading the target after S seconds without records")
    args = parser.parse_args(argv)

    mirror = Mirror(args.source, args.target, args.topics, mode="preserve", progress=False)
    copied = mirror.run(once=True)
    print(f"mirrored {copied['records']} records", flush=True)

    # The failed-over application: the same group id, now on the target cluster. It starts at
    # the offsets the group had committed on the source (copied by the mirror), so it neither
    # skips nor repeats a record.
    consumer = Consumer({"bootstrap.servers": args.target, "group.id": args.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    read = 0
    try:
        consumer.subscribe([f"^({args.topics})$"])  # the topics the mirror matched
        last = time.monotonic()
        while time.monotonic() - last < args.idle_exit:
            records = [m for m in consumer.consume(100, timeout=0.5) if not m.error()]
            for m in records:
                key = (m.key() or b"").decode(errors="replace")
                print(f"{m.topic()}[{m.partition()}]@{m.offset()} key={key}", flush=True)
            if records:
                last = time.monotonic()
                read += len(records)
                consumer.commit(asynchronous=False)  # the group's progress, now on the target
    finally:
        consumer.close()
    print(f"the group read {read} records on the target", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
