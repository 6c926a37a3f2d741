"""unlink (and rmdir) failing while the broker deletes files (the matrix's rows "unlink fails
in retention / DeleteRecords" and "unlink fails in topic deletion").

Retention (retention.bytes here) and DeleteRecords first move the log start and take the
segments below it out of the log (out of memory and out of ``partition-state.json``), then
remove their files. A file the disk does not let go of is one log line naming the segment and
the error; the log is already consistent without it (reads start at the log start, the log
start is the same after a restart), the next retention check tries again, and a restart
removes what is left. A deleted topic's directory is renamed to ``*-delete`` before its files
are removed, after ``topics.json`` no longer names the topic: a rename, unlink or rmdir that
fails is one log line, and the next start removes what is left.

The broker runs under ``fiu-run -x`` (libfiu wraps unlink(), which Python's os.unlink calls);
topic deletion runs in this process, the LogManager's removal walking the directory with
unlinkat() and rmdir(), which libfiu does not wrap.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from fault_support import (
    TIMEOUT_S,
    IdempotentWriter,
    fail,
    fail_os_call,
    read_partition,
    restart_healthy,
    segment_files,
)
from integration_support import create_topics, unique
from raw_client import RawClient

from kipproducer.broker.storage.log_manager import LogManager
from kipproducer.protocol import error_codes as ec
from kipproducer.records import encode_batch

UNLINK = "posix/io/dir/unlink"
DELETE_RECORDS = 21
#: Segments of about 18 records; retention keeps the newest 3 or so.
SMALL_SEGMENTS = {"segment.bytes": "2048", "retention.bytes": "6000"}
FAST_RETENTION = {"log.retention.check.interval.ms": "200"}


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("lw")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S,
                                              cached=False)[0]
    finally:
        consumer.close()


def delete_records(bootstrap: str, topic: str, offset: int):
    """One DeleteRecords of partition 0 below ``offset``: its partition result."""
    client = RawClient(bootstrap)
    try:
        body = client.request(DELETE_RECORDS, 2, topics=[{"name": topic, "partitions": [
            {"partition_index": 0, "offset": offset}]}], timeout=10_000)
        return body.topics[0].partitions[0]
    finally:
        client.close()


def bases(broker, topic: str) -> list[int]:
    return [int(path.stem) for path in segment_files(broker.data_dir, topic)]


def test_segments_whose_files_cannot_be_unlinked_leave_the_log_and_go_later(
        kip_broker, fiu) -> None:
    broker = kip_broker(FAST_RETENTION, wrapper=fiu)
    topic = unique("unlink")
    create_topics(broker.bootstrap, {topic: 1}, SMALL_SEGMENTS)
    writer = IdempotentWriter(broker.bootstrap, topic)
    mark = len(broker.stderr_text())

    # Retention: the oldest segment leaves the log, its file stays.
    fail(broker.pid, UNLINK)
    writer.write(80)
    logged = broker.wait_for_log("could not delete the files of segment 0 ([Errno 5]",
                                 start=mark)
    assert "Traceback" not in logged
    start = low_watermark(broker.bootstrap, topic)
    assert start > 0 and 0 in bases(broker, topic)
    acked = [(sent.offset, sent.value) for sent in writer.acked]
    assert read_partition(broker.bootstrap, topic, expect=80 - start) == acked[start:]
    # The disk lets go again: the next retention check removes the files.
    fail(broker.pid, UNLINK, on=False)
    deadline = time.monotonic() + TIMEOUT_S
    while min(bases(broker, topic)) < start:
        assert time.monotonic() < deadline, bases(broker, topic)
        time.sleep(0.1)

    # DeleteRecords: answered with the new log start although no file could be removed.
    fail(broker.pid, UNLINK)
    target = acked[-5][0]
    answer = delete_records(broker.bootstrap, topic, target)
    assert (answer.error_code, answer.low_watermark) == (ec.NONE, target)
    assert min(bases(broker, topic)) < target - 20  # whole segments below it are still there
    assert read_partition(broker.bootstrap, topic, expect=5) == acked[-5:]
    broker.wait_for_log("could not delete the files of segment")

    restart_healthy(broker)  # the restart removes what was left
    assert low_watermark(broker.bootstrap, topic) == target
    assert read_partition(broker.bootstrap, topic, expect=5) == acked[-5:]
    assert all(base >= target - 20 for base in bases(broker, topic))
    writer.reconnect(broker.bootstrap)
    assert writer.write_one().base_offset == 80
    writer.close()


@pytest.mark.parametrize("failing", ["unlink-and-rmdir", "rename"])
def test_a_deleted_topic_whose_files_cannot_be_removed_is_gone_and_cleaned_later(
        tmp_path: Path, monkeypatch, caplog, failing: str) -> None:
    data_dir = tmp_path / "data"
    logs = LogManager(data_dir)
    logs.create_topic("t", 2)
    for partition in range(2):
        logs.get_log("t", partition).append(
            bytearray(encode_batch([(b"k", b"v", None, 1)])), assign_offsets=True)

    if failing == "rename":  # the directory's rename out of the way (topics.json's works)
        fail_os_call(monkeypatch, "replace", errno.EIO,
                     lambda path: os.path.basename(path).startswith("t-"))
    else:
        fail_os_call(monkeypatch, "unlink", errno.EIO)
        fail_os_call(monkeypatch, "rmdir", errno.EIO)
    with caplog.at_level(logging.INFO, logger="kipproducer.broker.storage"):
        logs.delete_topic("t")  # the topic is gone from topics.json before any file goes
    monkeypatch.undo()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2 and not any(r.exc_info for r in errors), caplog.text
    assert "[Errno 5]" in errors[0].getMessage() and "the next start" in (
        errors[0].getMessage())
    assert "t" not in logs.topics()
    logs.close()
    assert len([path for path in data_dir.iterdir() if path.name.startswith("t-")]) == 2

    logs = LogManager(data_dir)  # the disk is healthy again
    assert "t" not in logs.topics()
    assert not [path for path in data_dir.iterdir() if path.name.startswith("t-")]
    logs.create_topic("t", 1)  # a new topic of the same name starts empty
    assert logs.get_log("t", 0).log_end_offset == 0
    logs.close()
