"""I/O errors injected into a running broker with libfiu (the matrix's rows "EIO on segment
writes" and "fsync failing with flush.messages=1").

The broker runs under ``fiu-run -x`` (Debian's fiu-utils; the tests skip with one line where
it is not installed) and ``fiu-ctrl`` turns a failure point on and off in the live process:
libfiu's preload wraps libc's write() and fsync(), which Python's os.write and os.fsync call,
so every write (or fsync) of the broker fails with EIO while the point is on.

- fsync failing with flush.messages=1: the produce in flight is never acknowledged, nor its
  retry, nor any later produce, while the partition is offline; after a restart the log ends
  at the last acknowledged record, the failed batch is gone (its sequence appends anew, it is
  no duplicate) and every batch passes its CRC.
- write failing with EIO under a librdkafka producer: no false success, nothing partial read
  during the fault; after a restart the log ends at the last acknowledged offset + 1.
- pread failing with EIO: fetches get KAFKA_STORAGE_ERROR, nothing partial is served.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from fault_support import (
    FSYNC,
    PREAD,
    WRITE,
    IdempotentWriter,
    batches_on_disk,
    fail,
    high_watermark,
    read_partition,
    segment_files,
)
from integration_support import create_topics, unique

from kipproducer.protocol import error_codes as ec


def test_a_failed_fsync_is_never_acknowledged(kip_broker, fiu) -> None:
    broker = kip_broker({"log.flush.interval.messages": 1}, wrapper=fiu)
    topic = unique("fsync-fails")
    create_topics(broker.bootstrap, {topic: 1})
    writer = IdempotentWriter(broker.bootstrap, topic)
    writer.write(20)

    fail(broker.pid, FSYNC)
    answers = [writer.send(20, b"in flight"), writer.send(20, b"in flight")]  # and its retry
    answers.append(writer.send(21, b"later"))
    fail(broker.pid, FSYNC, on=False)
    answers.append(writer.send(20, b"in flight"))  # still offline: the page cache lied once
    assert [a.error_code for a in answers] == [ec.KAFKA_STORAGE_ERROR] * 4
    broker.wait_for_log("offline after an I/O error in an append")
    assert broker.stop() == 0  # a clean stop leaves the offline partition's files alone

    broker.wrapper = []
    broker.start()  # the first start after the fault succeeds
    assert high_watermark(broker.bootstrap, topic) == 20
    writer.reconnect(broker.bootstrap)
    again = writer.send(20, b"sent again")  # not a duplicate: the failed batch is gone
    assert (again.error_code, again.base_offset) == (ec.NONE, 20)
    got = read_partition(broker.bootstrap, topic, expect=21)
    assert got == [(s.offset, s.value) for s in writer.acked] + [(20, b"sent again")]
    for path in segment_files(broker.data_dir, topic):
        assert all(batch.crc_ok for batch in batches_on_disk(path))
    writer.close()


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["default-flush", "flush-every"])
def test_eio_on_segment_writes_never_acknowledges_and_leaves_nothing_partial(
        kip_broker, fiu, flush_messages) -> None:
    config = {} if flush_messages is None else {"log.flush.interval.messages": flush_messages}
    broker = kip_broker(config, wrapper=fiu)
    topic = unique("eio")
    create_topics(broker.bootstrap, {topic: 1})
    acked: dict[bytes, int] = {}
    failed: dict[bytes, str] = {}

    def report(err, msg) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            failed[msg.value()] = err.name()

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 2, "message.timeout.ms": 4000})
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            producer.produce(topic, b"%06d" % sent + b"y" * 200, on_delivery=report)
            sent += 1
            producer.poll(0)

    send(200)
    producer.flush(10)
    assert len(acked) == 200
    fail(broker.pid, WRITE)
    send(300)
    time.sleep(0.5)
    during = read_partition(broker.bootstrap, topic, quiet_s=0.5)
    fail(broker.pid, WRITE, on=False)
    producer.flush(20)
    assert len(acked) + len(failed) == sent
    assert failed, "no write failed"
    assert set(failed.values()) <= {"KAFKA_STORAGE_ERROR", "_MSG_TIMED_OUT"}
    at = {offset: value for value, offset in acked.items()}
    assert all(at.get(offset) == value for offset, value in during)

    assert broker.stop() == 0
    broker.wrapper = []
    broker.start()
    end = max(acked.values()) + 1
    assert high_watermark(broker.bootstrap, topic) == end
    got = read_partition(broker.bootstrap, topic, expect=end)
    assert got == sorted((offset, value) for value, offset in acked.items())
    for path in segment_files(broker.data_dir, topic):
        assert all(batch.crc_ok for batch in batches_on_disk(path))


def test_eio_on_segment_reads_fails_the_fetch_and_serves_nothing_partial(kip_broker, fiu) -> None:
    """pread failing with EIO: fetches of the partition get KAFKA_STORAGE_ERROR, a consumer
    reads nothing meanwhile (no partial batch), and reads everything once the disk reads
    again; a read error changes nothing on disk, so the partition stays online."""
    broker = kip_broker(wrapper=fiu)
    topic = unique("read-eio")
    create_topics(broker.bootstrap, {topic: 1})
    writer = IdempotentWriter(broker.bootstrap, topic)
    writer.write(30)
    fail(broker.pid, PREAD)
    assert read_partition(broker.bootstrap, topic, quiet_s=1.5) == []
    fail(broker.pid, PREAD, on=False)
    broker.wait_for_log("reading segment 0: [Errno 5] Input/output error")
    assert read_partition(broker.bootstrap, topic, expect=30) == [
        (s.offset, s.value) for s in writer.acked]
    assert writer.send(30, b"more").error_code == ec.NONE
    writer.close()
