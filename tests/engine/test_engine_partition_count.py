"""Engine.partition_count answers from fresh metadata in the caller's thread (a bulk call asks
it once per call: a round trip to the sender thread each time cost the sender a wake-up, a
task and a cross-thread future), and asks the sender thread when the metadata is missing or
older than topic.metadata.refresh.interval.ms."""

from __future__ import annotations

import time

from kipproducer import Producer


def test_fresh_metadata_answers_without_the_sender_thread(embedded):
    broker = embedded({"num.partitions": 3})
    p = Producer({"bootstrap.servers": broker.bootstrap_servers,
                  "topic.metadata.refresh.interval.ms": 1500})
    engine = p._engine_or_start()
    real_call = engine.call
    asked: list[str] = []

    def spy(coro, timeout=None):
        asked.append(coro.__qualname__)
        return real_call(coro, timeout)

    engine.call = spy
    try:
        assert engine.partition_count("pc-topic") == 3  # unknown yet: the sender fetches it
        assert asked == ["Engine._partition_count"]
        for _ in range(5):
            assert engine.partition_count("pc-topic") == 3
        assert p.produce_arrays("pc-topic", [b"v"] * 10, keys=[b"k%d" % i for i in range(10)])
        assert asked == ["Engine._partition_count"]  # answered in this thread since
        assert p.flush(30) == 0
        time.sleep(1.6)  # stale now: asked again, as before
        assert engine.partition_count("pc-topic") == 3
        assert asked == ["Engine._partition_count"] * 2
    finally:
        engine.call = real_call
        p.flush(10)
