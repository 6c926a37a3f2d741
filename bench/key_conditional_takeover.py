"""What a takeover costs emulated per-key conditions (docs/per-key-conditional.md, "Emulated
mode") on a stock broker: the stand-in (`kip broker` with its extensions off) or a 1-node
Apache Kafka (``--broker kafka1``, from the jars tests/apache_kafka/kafka_jars.py caches).

One partition holds ``--records`` records over ``--keys`` keys (values of ``--value-bytes``),
written by a plain producer; a first writer makes one conditional append (with the index
topic, its transaction writes every key's answer and a checkpoint). Then a NEW writer's first
conditional append is timed, the takeover: once reading the whole partition into its index,
once through ``kip.emulation.key.index.topic`` (the index topic, then the partition's tail).
Last, ``--calls`` conditional appends of one writer, one after the other, give the cost of a
call once the index is built.

    python bench/key_conditional_takeover.py [--records N] [--keys N] [--value-bytes N]
        [--calls N] [--broker standin|kafka1]
"""

from __future__ import annotations

import argparse
import time
import uuid

# the brokers as bench/side_by_side_gaps.py starts them
from side_by_side_gaps import started


def writer(bootstrap: str, index_topic: str | None):
    from kipproducer import Producer
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
              "kip.mode": "emulated", "kip.emulation.transactional.id": uuid.uuid4().hex}
    if index_topic:
        config["kip.emulation.key.index.topic"] = index_topic
    return Producer(config)


def conditional(p, topic: str, key: bytes, expected: int) -> tuple[object, int]:
    out: list = []
    p.produce(topic, b"event", key, partition=0, expected_key_offset=expected,
              on_delivery=lambda err, msg: out.append((err, msg.offset())))
    assert p.flush(600) == 0
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--broker", choices=("standin", "kafka1"), default="standin")
    args = parser.parse_args()
    from confluent_kafka import Producer as StockProducer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kipproducer.errors import KEY_ABSENT
    from kipproducer.producer import emulation_of

    with started(args.broker) as bootstrap:
        topic = f"takeover-{uuid.uuid4().hex[:8]}"
        index_topic = f"takeover-index-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "-1"})]
                            )[topic].result(60)
        plain = StockProducer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                               "batch.size": 1 << 20})
        value = b"x" * args.value_bytes
        for i in range(args.records):
            while True:
                try:
                    plain.produce(topic, value, b"key-%d" % (i % args.keys), partition=0)
                    break
                except BufferError:
                    plain.poll(0.05)
        assert plain.flush(600) == 0
        last_of = {b"key-%d" % k: max(i for i in range(k, args.records, args.keys))
                   for k in range(min(args.keys, 3))}
        with writer(bootstrap, index_topic) as first:  # fills the index topic
            err, at = conditional(first, topic, b"key-0", last_of[b"key-0"])
            assert err is None, err
        print(f"{args.broker}: {args.records} records, {args.keys} keys, "
              f"{args.value_bytes}-byte values in one partition")
        for key, label, index in ((b"key-1", "reading the partition", None),
                                  (b"key-2", "through the index topic", index_topic)):
            with writer(bootstrap, index) as p:
                p.kip_mode(topic)  # the probe and the fence, outside the timed part
                started_at = time.perf_counter()
                err, _ = conditional(p, topic, key, last_of[key])
                took = time.perf_counter() - started_at
                assert err is None, err
                read = emulation_of(p).key_records_read
            print(f"  takeover {label}: {took * 1000:.0f} ms (records of the partition "
                  f"read: {read})")
        with writer(bootstrap, None) as p:
            err, last = conditional(p, topic, b"calls", KEY_ABSENT)
            assert err is None, err
            started_at = time.perf_counter()
            for _ in range(args.calls):
                err, last = conditional(p, topic, b"calls", last)
                assert err is None, err
            took = time.perf_counter() - started_at
        print(f"  a conditional call with the index built: {took / args.calls * 1000:.1f} ms "
              f"(mean of {args.calls})")


if __name__ == "__main__":
    main()
