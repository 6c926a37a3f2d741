"""Damaged index, time index, partition checkpoint and producer-state snapshot (the matrix's
row "corrupt index, time index, checkpoint, producer snapshot").

Each file is damaged while the broker is down (garbage, a cut entry, a bit flipped inside an
entry or a digit, the file removed); after the restart every record is read back, timestamp
lookups answer as before, and resending the last idempotent batch is still recognised as a
duplicate (its first offset comes back, nothing is appended), while the next sequence appends
at the log end. A file that cannot be trusted is rebuilt from the log, the truth.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from fault_support import (
    IdempotentWriter,
    high_watermark,
    partition_dir,
    read_partition,
    segment_files,
)
from integration_support import BrokerStartError, create_topics, unique

from kipproducer.protocol import error_codes as ec

RECORDS = 60
SMALL_SEGMENTS = {"segment.bytes": "3000", "index.interval.bytes": "150"}


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(max(path.stat().st_size, 64)))


def _cut_entry(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 3)


def _flip_entry_position(path: Path) -> None:
    """Entry 1 of an .index is (int32 relative offset, int32 position): its position is made
    to point into the middle of the batch before, while the entries still increase (load's
    checks pass)."""
    data = bytearray(path.read_bytes())
    assert len(data) >= 24, "the test needs three index entries"
    first = int.from_bytes(data[4:8], "big")
    data[12:16] = (first + 7).to_bytes(4, "big")
    path.write_bytes(bytes(data))


def _flip_digit(path: Path) -> None:
    """A bit flipped in a number of a JSON file: still valid JSON, a different value."""
    text = path.read_text()
    match = list(re.finditer(r'"(recovery_point|offset|log_start_offset)": (\d+)', text))[0]
    digit = match.start(2)
    flipped = chr(ord(text[digit]) ^ 1)
    path.write_text(text[:digit] + flipped + text[digit + 1 :])


def _remove(path: Path) -> None:
    path.unlink()


def _first_segment(directory: Path, suffix: str) -> Path:
    return sorted(directory.glob("*" + suffix))[0]


REBUILT = "rebuilt the indexes of segment"
CHECKPOINT = "unreadable partition-state.json"
SNAPSHOT = "unusable producer state snapshot"
# name: (file, edit, what the broker logs about it)
DAMAGE = {
    "index-garbage": (".index", _garbage, REBUILT),
    "index-cut-entry": (".index", _cut_entry, REBUILT),
    "index-entry-points-elsewhere": (".index", _flip_entry_position,
                                     "rebuilding the indexes of segment"),
    "index-removed": (".index", _remove, REBUILT),
    "timeindex-garbage": (".timeindex", _garbage, REBUILT),
    "checkpoint-garbage": ("partition-state.json", _garbage, CHECKPOINT),
    "checkpoint-digit-flipped": ("partition-state.json", _flip_digit, CHECKPOINT),
    "snapshot-garbage": ("producer-state.snapshot", _garbage, SNAPSHOT),
    "snapshot-digit-flipped": ("producer-state.snapshot", _flip_digit, SNAPSHOT),
}


def _time_lookups(bootstrap: str, topic: str, timestamps: list[int]) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("times")})
    try:
        # One lookup per call: librdkafka merges the entries of one partition in a request.
        return [consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=20)[0].offset
                for ts in timestamps]
    finally:
        consumer.close()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_file_is_rebuilt_and_the_last_sequence_is_still_a_duplicate(
        kip_broker, damage: str) -> None:
    broker = kip_broker()
    topic = unique("damaged")
    create_topics(broker.bootstrap, {topic: 1}, SMALL_SEGMENTS)
    writer = IdempotentWriter(broker.bootstrap, topic)
    writer.write(RECORDS, size=100)
    probes = [writer.t0 + i for i in (0, 7, 31, RECORDS - 1)]
    lookups = _time_lookups(broker.bootstrap, topic, probes)
    assert lookups == [writer.acked[i].offset for i in (0, 7, 31, RECORDS - 1)]
    assert broker.stop() == 0
    directory = partition_dir(broker.data_dir, topic)
    assert len(segment_files(broker.data_dir, topic)) >= 3
    suffix, edit, logged = DAMAGE[damage]
    target = (directory / suffix) if suffix.endswith((".json", ".snapshot")) else (
        _first_segment(directory, suffix))
    # An offset the first segment's index names (entry 1): reads from it go through it.
    entries = _first_segment(directory, ".index").read_bytes()
    indexed = int(_first_segment(directory, ".log").name[:20]) + int.from_bytes(
        entries[8:12], "big")
    edit(target)

    broker.start()
    assert high_watermark(broker.bootstrap, topic) == RECORDS
    assert read_partition(broker.bootstrap, topic, expect=RECORDS) == [
        (s.offset, s.value) for s in writer.acked]
    assert _time_lookups(broker.bootstrap, topic, probes) == lookups
    assert read_partition(broker.bootstrap, topic, expect=RECORDS - indexed, start=indexed) == [
        (s.offset, s.value) for s in writer.acked[indexed:]]
    writer.reconnect(broker.bootstrap)
    last = writer.acked[-1]
    again = writer.send(last.sequence, last.value)
    assert (again.error_code, again.base_offset) == (ec.NONE, last.offset)
    assert high_watermark(broker.bootstrap, topic) == RECORDS
    after = writer.send(RECORDS, b"next")
    assert (after.error_code, after.base_offset) == (ec.NONE, RECORDS)
    broker.wait_for_log(logged, timeout=1)
    writer.close()


def test_a_damaged_producer_id_counter_is_refused_with_one_message(kip_broker) -> None:
    """producer-ids.json cannot be rebuilt from the logs (an id must never repeat): a flipped
    digit is refused at startup with one line, and the broker starts once the file is
    replaced as the line says."""
    broker = kip_broker()
    topic = unique("pids")
    create_topics(broker.bootstrap, {topic: 1})
    first = IdempotentWriter(broker.bootstrap, topic)
    first.close()
    assert broker.stop() == 0
    counter = broker.data_dir / "producer-ids.json"
    text = counter.read_text()
    digit = re.search(r'"next_block_start": (\d)', text).start(1)
    counter.write_text(text[:digit] + chr(ord(text[digit]) ^ 1) + text[digit + 1 :])

    with pytest.raises(BrokerStartError):
        broker.start()
    assert broker.proc.returncode == 2
    last_start = broker.stderr_text().rsplit("==== start", 1)[1]
    assert "Traceback" not in last_start
    assert f"kip broker: {counter}: " in last_start
    assert "the file is damaged" in last_start and "cannot be handed out safely" in last_start
    counter.write_text('{"version": 1, "next_block_start": 5000}')
    broker.start()
    again = IdempotentWriter(broker.bootstrap, topic)
    assert again.producer_id >= 5000 > first.producer_id
    again.close()
