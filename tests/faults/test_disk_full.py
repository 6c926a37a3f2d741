"""A full disk under a running broker (the matrix's row "ENOSPC on segment writes").

The data dir lives on a small tmpfs the test mounts (root only; the test skips with one line
where mounting is not permitted) and a filler file takes the rest of its space while a
librdkafka idempotent producer (acks=all) keeps sending. Asserted: no false success (every
record acknowledged is in the log at its offset after the restart), nothing partial visible
to a consumer during the fault, the partition answering KAFKA_STORAGE_ERROR; once the filler
is gone, the broker starts the first time, its log ends at the last acknowledged offset + 1,
every batch on disk passes its CRC, and producing continues.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from fault_support import batches_on_disk, high_watermark, read_partition, segment_files
from integration_support import create_topics, unique

DISK_BYTES = 6 * 1024 * 1024
VALUE = b"x" * 1000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_BYTES (ask for it before kip_broker: unmounted after the broker
    stops)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of the file system holding ``directory``."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return filler


class Sender:
    """A librdkafka idempotent producer that keeps every delivery report."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 6000, "retry.backoff.ms": 100})
        self.acked: dict[bytes, int] = {}
        self.failed: dict[bytes, str] = {}
        self.sent = 0

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value()] = msg.offset()
        else:
            self.failed[msg.value()] = err.name()

    def send(self, count: int) -> None:
        for _ in range(count):
            self.producer.produce(self.topic, b"%06d-" % self.sent + VALUE,
                                  on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)
        self.producer.flush(20)


class Committer:
    """A consumer group's committed offset of partition 0, committed synchronously."""

    def __init__(self, bootstrap: str, topic: str, group: str = "full-disk-group") -> None:
        self.partition = TopicPartition(topic, 0)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False})
        self.last_committed = -1001  # librdkafka's OFFSET_INVALID: nothing committed

    def commit(self, offset: int, metadata: str = "") -> bool:
        """True when the broker answered the commit with success."""
        try:
            self.consumer.commit(
                offsets=[TopicPartition(self.partition.topic, 0, offset, metadata=metadata)],
                asynchronous=False)
        except KafkaException:
            return False
        self.last_committed = offset
        return True

    def committed(self) -> int:
        return self.consumer.committed([self.partition], timeout=20)[0].offset


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["default-flush", "flush-every"])
def test_a_full_disk_never_acknowledges_what_it_did_not_keep(
        small_disk: Path, kip_broker, flush_messages: int | None) -> None:
    config = {} if flush_messages is None else {"log.flush.interval.messages": flush_messages}
    broker = kip_broker(config, data_dir=small_disk / "data", allow_tracebacks=False)
    topic = unique("enospc")
    create_topics(broker.bootstrap, {topic: 1}, {"segment.bytes": str(512 * 1024)})
    sender = Sender(broker.bootstrap, topic)
    sender.send(300)
    assert len(sender.acked) == 300 and not sender.failed

    group = Committer(broker.bootstrap, topic)
    assert group.commit(100)

    filler = fill(small_disk)
    sender.send(1500)  # more than the space left: writes fail with ENOSPC
    # A commit whose record needs a new page of the full disk: refused, the old one kept.
    assert not group.commit(200, metadata="m" * 4000)
    assert len(sender.acked) + len(sender.failed) == sender.sent
    assert sender.failed, "the disk never filled up"
    assert set(sender.failed.values()) <= {"KAFKA_STORAGE_ERROR", "_MSG_TIMED_OUT"}
    broker.wait_for_log("No space left on device")
    # During the fault a reader sees acknowledged records only, never part of a batch.
    during = read_partition(broker.bootstrap, topic, quiet_s=1.0)
    at = {offset: value for value, offset in sender.acked.items()}
    assert all(at.get(offset) == value for offset, value in during)

    broker.kill()  # a broker on a full disk; the operator frees space and restarts it
    filler.unlink()
    broker.start()
    assert broker.starts == 2
    end = max(sender.acked.values()) + 1
    assert high_watermark(broker.bootstrap, topic) == end
    got = read_partition(broker.bootstrap, topic, expect=end)
    assert got == sorted((offset, value) for value, offset in sender.acked.items())
    for path in segment_files(broker.data_dir, topic):
        assert all(batch.crc_ok for batch in batches_on_disk(path)), path
    # The committed offset is the last commit that was answered with success.
    assert Committer(broker.bootstrap, topic).committed() == group.last_committed
    # Producing continues where the log ends.
    after = Sender(broker.bootstrap, topic)
    after.send(10)
    assert sorted(after.acked.values()) == list(range(end, end + 10))
