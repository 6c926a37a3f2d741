"""Helpers for the broker fault tests: acknowledged writes, reading back, the files on disk.

``IdempotentWriter`` sends records one batch each with exact requests (tests/kip's RawClient)
and remembers each batch's producer id, epoch, sequence and acknowledged offset, so a test
can resend the last batch after a fault (it must be a duplicate) and knows exactly what was
acknowledged. ``read_partition`` reads back with librdkafka (check.crcs on), the way a
consumer does. The ``segment_*`` helpers look at and edit the partition's files.
``start_coordinators`` runs the broker's storage, group and transaction coordinators in this
process on a data dir (as the broker starts them), for the tests that fault their files.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from integration_support import unique
from raw_client import RawClient

from kipproducer.broker.groups import GroupCoordinator
from kipproducer.broker.storage import PartitionLog
from kipproducer.broker.storage.log_manager import LogManager
from kipproducer.broker.transactions import TransactionCoordinator
from kipproducer.broker.transactions.store import SEGMENT_BYTES
from kipproducer.protocol import error_codes as ec
from kipproducer.records import Batch, decode_batches, encode_batch, validate_batch

INIT_PRODUCER_ID = 22
TIMEOUT_S = 20.0

# libfiu's failure points (fiu-utils' function list) for the system calls Python's os module
# makes: os.write, os.fsync, os.open, os.replace and os.pread call exactly these.
WRITE = "posix/io/rw/write"
FSYNC = "posix/io/sync/fsync"
OPEN = "posix/io/oc/open"
RENAME = "posix/io/dir/rename"
PREAD = "posix/io/rw/pread"


def fail(pid: int, point: str, on: bool = True, *, error: int = errno.EIO) -> None:
    """Make every call of libfiu's ``point`` in the broker ``pid`` (run under ``fiu-run -x``)
    fail with ``error`` from now on, or (``on=False``) succeed again."""
    command = f"enable name={point},failinfo={error}" if on else f"disable name={point}"
    subprocess.run(["fiu-ctrl", "-c", command, str(pid)], check=True, timeout=10)


def fail_os_call(monkeypatch, name: str, error: int,
                 when: Callable[[str], bool] = lambda path: True) -> None:
    """In this process (the storage code running in the test): every call of os.<name>
    whose path (its first argument) ``when`` accepts fails with ``error``."""
    real = getattr(os, name)

    def failing(path, *args, **kwargs):
        if when(os.fspath(path)):
            raise OSError(error, os.strerror(error) + " (injected)", path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, failing)


@dataclass(frozen=True)
class Sent:
    sequence: int
    value: bytes
    offset: int


class IdempotentWriter:
    """An idempotent producer speaking exact requests: one record per batch, acks=all."""

    def __init__(self, bootstrap: str, topic: str, partition: int = 0, *,
                 keys: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.keys = keys  # record i has key k<i>, or k<i % keys> (for compacted topics)
        self.client = RawClient(bootstrap)
        body = self.client.request(INIT_PRODUCER_ID, 4, transactional_id=None,
                                   transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        assert body.error_code == 0, body
        self.producer_id, self.epoch = body.producer_id, body.producer_epoch
        self.acked: list[Sent] = []
        self.t0 = int(time.time() * 1000) - 60_000  # record i has timestamp t0 + i

    def batch(self, sequence: int, value: bytes) -> bytes:
        key = b"k%d" % (sequence if self.keys is None else sequence % self.keys)
        return encode_batch([(key, value, None, self.t0 + sequence)],
                            producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=sequence)

    def send(self, sequence: int, value: bytes):
        """One Produce of one batch; the partition response."""
        return self.client.produce(self.topic, {self.partition: self.batch(sequence, value)},
                                   mode=0)[self.partition]

    def write(self, count: int, size: int = 40) -> list[Sent]:
        """``count`` more records, each acknowledged (else the test fails)."""
        for _ in range(count):
            answer = self.write_one(size)
            assert answer.error_code == ec.NONE, (answer.error_code, answer.error_message)
        return self.acked

    def write_one(self, size: int = 40):
        """The next record; its partition response (``acked`` grows when it is a success)."""
        sequence = len(self.acked)
        value = b"value-%06d-" % sequence + b"x" * size
        answer = self.send(sequence, value)
        if answer.error_code == ec.NONE:
            self.acked.append(Sent(sequence, value, answer.base_offset))
        return answer

    def reconnect(self, bootstrap: str) -> None:
        self.client.close()
        self.client = RawClient(bootstrap)

    def close(self) -> None:
        self.client.close()


def restart_healthy(broker) -> None:
    """A clean stop (exit status 0, also with a partition offline), then a start without
    libfiu: the disk is healthy again."""
    assert broker.stop() == 0
    broker.wrapper = []
    broker.start()


def read_partition(bootstrap: str, topic: str, partition: int = 0, *, expect: int | None = None,
                   quiet_s: float = 1.5, start: int = OFFSET_BEGINNING,
                   isolation: str = "read_uncommitted") -> list[tuple[int, bytes]]:
    """(offset, value) of every record a librdkafka consumer (check.crcs=true, with
    ``isolation`` as its isolation.level) reads from ``start``: until ``expect`` records came,
    or nothing new came for ``quiet_s``. A consumer error (a CRC failure among them) fails the
    test."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": unique("fault-reader"),
        "enable.auto.commit": False,
        "check.crcs": True,
        "enable.partition.eof": False,
        "fetch.error.backoff.ms": 100,
        "isolation.level": isolation,
    })
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        quiet_until = time.monotonic() + quiet_s
        while time.monotonic() < deadline:
            if expect is not None and len(out) >= expect:
                break
            if expect is None and time.monotonic() > quiet_until:
                break
            for msg in consumer.consume(1000, timeout=0.2):
                err = msg.error()
                assert err is None or err.retriable(), f"consumer error: {err}"
                if err is None:
                    out.append((msg.offset(), msg.value()))
                    quiet_until = time.monotonic() + quiet_s
        return out
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                              timeout=TIMEOUT_S, cached=False)[1]
    finally:
        consumer.close()


def watermark_error(bootstrap: str, topic: str, partition: int = 0) -> str | None:
    """The error a ListOffsets for the partition gets, None when it is answered."""
    try:
        high_watermark(bootstrap, topic, partition)
    except KafkaException as exc:
        return exc.args[0].name()
    return None


def partition_dir(data_dir: Path, topic: str, partition: int = 0) -> Path:
    return data_dir / f"{topic}-{partition}"


def segment_files(data_dir: Path, topic: str, partition: int = 0) -> list[Path]:
    return sorted(partition_dir(data_dir, topic, partition).glob("*.log"))


@dataclass(frozen=True)
class OnDisk:
    position: int
    size: int
    base_offset: int
    last_offset: int
    crc_ok: bool


def batches_on_disk(path: Path) -> list[OnDisk]:
    """Every whole batch of a segment file, in order, and whether its CRC checks."""
    data = path.read_bytes()
    out = []
    for batch in decode_batches(data, validate=False, strict=False, allow_partial=True):
        try:
            validate_batch(batch.raw, strict=False)
            ok = True
        except Exception:
            ok = False
        out.append(OnDisk(batch.position, batch.size_in_bytes, batch.base_offset,
                          batch.last_offset, ok))
    return out


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


# -- the coordinators in this process -----------------------------------------------------------

#: A group log compaction every 3 or 4 commits.
COMPACT_AFTER_BYTES = 300


def group_coordinator(data_dir: Path) -> GroupCoordinator:
    """A group coordinator whose log compacts every few commits (not started)."""
    return GroupCoordinator(data_dir, min_session_timeout_ms=10,
                            compact_log_after_bytes=COMPACT_AFTER_BYTES)


#: The data topic the in-process transaction tests write to (one partition).
TOPIC = "t"


@dataclass
class Coordinators:
    logs: LogManager
    groups: GroupCoordinator | None
    transactions: TransactionCoordinator

    async def close(self) -> None:
        await self.transactions.close()
        if self.groups is not None:
            await self.groups.close()
        self.logs.close()


async def start_coordinators(data_dir: Path, *, with_groups: bool = False,
                             topic_config: dict[str, str] | None = None,
                             segment_bytes: int = SEGMENT_BYTES) -> Coordinators:
    """The broker's start on ``data_dir``, in its order: the LogManager (with the topic
    ``TOPIC``, created with ``topic_config`` when missing), the group coordinator in
    ``__groups`` (``with_groups``), then the transaction coordinator in ``__transactions``
    (``segment_bytes``: its log's), which completes every transaction left in a Prepare
    state before this returns."""
    logs = LogManager(data_dir)
    if TOPIC not in logs.topics():
        logs.create_topic(TOPIC, 1, topic_config)
    groups = None
    if with_groups:
        groups = GroupCoordinator(data_dir / "__groups")
        await groups.start()
    transactions = TransactionCoordinator(data_dir / "__transactions", segment_bytes=segment_bytes,
                                          allocate_producer_id=logs.allocate_producer_id,
                                          logs=logs, groups=groups)
    await transactions.start()
    return Coordinators(logs, groups, transactions)


def log_batches(log: PartitionLog) -> Iterator[Batch]:
    """Every batch of a partition log, from its start to its end, control batches too."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        if not result.records:
            break
        yield from decode_batches(result.records, validate=True, strict=False)
        offset = result.next_offset


def is_commit_marker(batch: Batch) -> bool:
    """Whether a control batch is a COMMIT marker (else an ABORT): the control record's key
    is (version int16, type int16), type 1 = COMMIT."""
    return bytes(next(iter(batch)).key)[3] == 1
