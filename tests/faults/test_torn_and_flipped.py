"""Offline edits of a partition's files, then a restart of the broker (the matrix's rows
"torn or garbage tail" and "a bit flip in an old batch").

- A tail torn inside its last batch, or followed by zeros or garbage (what an OS crash or a
  file extended but never written leaves): recovery keeps every whole batch before the tear,
  drops the rest, logs the byte and offset it cut at, rebuilds the indexes, and the next
  produce continues at the new log end.
- A bit flipped in an old batch's records: no fetch returns that batch, the records before it
  are read, the log is never cut below what was acknowledged. After a clean stop the batch is
  refused when read (KAFKA_STORAGE_ERROR); after a kill -9 with flush.messages=1 the damage is
  found by recovery and the partition is refused whole, the files kept for an operator.
"""

from __future__ import annotations

import os

import pytest
from fault_support import (
    IdempotentWriter,
    batches_on_disk,
    flip_bit,
    high_watermark,
    partition_dir,
    read_partition,
    segment_files,
    watermark_error,
)
from integration_support import create_topics, unique

from kipproducer.protocol import error_codes as ec
from kipproducer.records import LAYOUT

RECORDS = 40


def _write(broker, topic: str, partitions: int = 1) -> IdempotentWriter:
    create_topics(broker.bootstrap, {topic: partitions})
    writer = IdempotentWriter(broker.bootstrap, topic)
    writer.write(RECORDS)
    return writer


# How the tail is damaged: (name, edit(path, last batch on disk) -> bytes kept of the file).
def _cut_in_header(path, last):
    os.truncate(path, last.position + 30)
    return last.position


def _cut_in_records(path, last):
    os.truncate(path, last.position + last.size - 5)
    return last.position


def _zeros_after(path, last):
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)  # a file extended by the OS whose data never reached the disk
    return last.position + last.size


def _garbage_after(path, last):
    with open(path, "ab") as f:
        f.write(os.urandom(700))
    return last.position + last.size


def _half_a_batch_after(path, last):
    data = path.read_bytes()[last.position : last.position + last.size]
    with open(path, "ab") as f:
        f.write(data[: len(data) // 2])  # the start of a later append, torn
    return last.position + last.size


TEARS = [_cut_in_header, _cut_in_records, _zeros_after, _garbage_after, _half_a_batch_after]


@pytest.mark.parametrize("tear", TEARS, ids=lambda f: f.__name__.strip("_"))
def test_a_torn_or_garbage_tail_is_cut_after_the_last_whole_batch(kip_broker, tear) -> None:
    broker = kip_broker()  # the default flush policy
    topic = unique("torn")
    writer = _write(broker, topic)
    broker.kill()  # nothing flushed: recovery validates the tail
    (path,) = segment_files(broker.data_dir, topic)
    on_disk = batches_on_disk(path)
    assert [b.base_offset for b in on_disk] == [s.offset for s in writer.acked]
    kept_bytes = tear(path, on_disk[-1])
    cut_into_last = kept_bytes == on_disk[-1].position
    kept = writer.acked[:-1] if cut_into_last else list(writer.acked)
    log_start = len(broker.stderr_text())

    broker.start()
    end = kept[-1].offset + 1
    assert high_watermark(broker.bootstrap, topic) == end
    assert read_partition(broker.bootstrap, topic, expect=len(kept)) == [
        (s.offset, s.value) for s in kept]
    assert path.stat().st_size == kept_bytes
    assert all(b.crc_ok for b in batches_on_disk(path))
    text = broker.stderr_text()[log_start:]
    assert f"truncated at byte {kept_bytes}" in text and f"-> {end})" in text, text
    index = path.with_suffix(".index")
    assert index.exists() and path.with_suffix(".timeindex").exists()
    # The next produce continues at the new log end (for a cut batch: the producer's next
    # sequence is the lost batch's, which the broker no longer has).
    writer.reconnect(broker.bootstrap)
    answer = writer.send(len(kept), b"after the tear")
    assert (answer.error_code, answer.base_offset) == (ec.NONE, end)
    writer.close()


def test_a_bit_flip_in_an_old_batch_is_never_served_and_never_cut(kip_broker) -> None:
    """Clean stop: the log is trusted as it is; the damaged batch is refused when read."""
    broker = kip_broker({"log.flush.interval.messages": 1})
    topic = unique("flip")
    writer = _write(broker, topic)
    assert broker.stop() == 0
    (path,) = segment_files(broker.data_dir, topic)
    on_disk = batches_on_disk(path)
    victim = on_disk[RECORDS // 2]
    size = path.stat().st_size
    flip_bit(path, victim.position + LAYOUT["records"] + 12, bit=3)  # inside the value

    broker.start()
    assert high_watermark(broker.bootstrap, topic) == RECORDS  # nothing cut
    got = read_partition(broker.bootstrap, topic)
    assert got == [(s.offset, s.value) for s in writer.acked[: RECORDS // 2]]
    assert path.stat().st_size == size
    broker.wait_for_log("fails its CRC-32C check")
    writer.close()


def test_a_bit_flip_found_by_recovery_takes_the_partition_offline_uncut(kip_broker) -> None:
    """kill -9 with flush.messages=1: every acknowledged batch was fsynced, so recovery must
    not take the damage for a torn write; the partition is refused with one message, the
    files are kept, and the topic's other partition is served."""
    broker = kip_broker({"log.flush.interval.messages": 1})
    topic = unique("flip-kill")
    writer = _write(broker, topic, partitions=2)
    other = IdempotentWriter(broker.bootstrap, topic, partition=1)
    other.write(5)
    broker.kill()
    (path,) = segment_files(broker.data_dir, topic)
    on_disk = batches_on_disk(path)
    victim = on_disk[RECORDS // 2]
    size = path.stat().st_size
    flip_bit(path, victim.position + LAYOUT["records"] + 12, bit=3)

    broker.start()
    assert watermark_error(broker.bootstrap, topic) == "KAFKA_STORAGE_ERROR"
    assert read_partition(broker.bootstrap, topic, quiet_s=1.0) == []
    writer.reconnect(broker.bootstrap)
    assert writer.send(RECORDS, b"more").error_code == ec.KAFKA_STORAGE_ERROR
    assert path.stat().st_size == size
    text = broker.wait_for_log("was not truncated")
    assert f"{partition_dir(broker.data_dir, topic)} is offline" in text
    assert read_partition(broker.bootstrap, topic, 1, expect=5) == [
        (s.offset, s.value) for s in other.acked]
    writer.close()
    other.close()
