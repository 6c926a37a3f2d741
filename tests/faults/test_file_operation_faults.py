"""fsync, open and rename failing under the default flush policy (the matrix's rows "fsync
fails" for the default policy, "open fails" and "rename fails").

Under the default policy (no flush.messages, no flush.ms) a partition's data is fsynced when
its segment rolls (before the next segment is created) and on a clean stop; its
``partition-state.json`` (log start, recovery point) is rewritten atomically (temp file,
fsync, rename) every log.flush.offset.checkpoint.interval.ms; a segment roll opens index
files and the new segment and renames the producer snapshot into place; compaction writes a
``.cleaned`` segment and renames it over the old one.

The broker runs under ``fiu-run -x`` and one failure point is turned on (for every call,
until turned off) while the operation it must hit runs: a produce that rolls the segment, or
the broker's timer (checkpoint, compaction, flush.ms). Asserted for each: (for a roll) the
appends into the active segment before it are still acknowledged; the failure is one log line
naming it and the error, and no traceback (the fixture fails the test on one); from then on
the partition answers KAFKA_STORAGE_ERROR (56) to produce and ListOffsets; the broker stops
cleanly, and after a restart on a healthy disk every acknowledged record is read back at its
offset and producing continues at the log end. Two more: a failure writing a compaction's
copy (not its swap) leaves the partition online, and a request the broker cannot load the
code for closes its connection with one line.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

import pytest
from fault_support import (
    FSYNC,
    OPEN,
    RENAME,
    IdempotentWriter,
    fail,
    high_watermark,
    read_partition,
    restart_healthy,
    segment_files,
    watermark_error,
)
from integration_support import create_topics, unique
from raw_client import RawClient

from kipproducer.protocol import error_codes as ec

#: Small segments: a roll every 15 records or so.
SMALL_SEGMENTS = {"segment.bytes": "2048"}
#: The broker's timer every 100 ms, a checkpoint every 300 ms.
FAST_TIMER = {"log.flush.scheduler.interval.ms": "100"}
FAST_CHECKPOINTS = {**FAST_TIMER, "log.flush.offset.checkpoint.interval.ms": "300"}
#: Compaction as soon as the records are 4 s old (IdempotentWriter stamps them a minute in
#: the past), on 5 keys, so the records are all written before the first pass.
COMPACTION = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
              "min.compaction.lag.ms": "64000", **SMALL_SEGMENTS}


@dataclass(frozen=True)
class Case:
    point: str  # libfiu's failure point
    error: int
    what: str  # the operation the broker's log line names
    rolls: bool  # hit by a produce that rolls the segment (else by the broker's timer)
    topic: dict[str, str] = field(default_factory=dict)
    broker: dict[str, str] = field(default_factory=dict)
    keys: int | None = None


CASES = {
    "fsync-at-roll": Case(FSYNC, errno.EIO, "an append", True, SMALL_SEGMENTS),
    "fsync-at-checkpoint": Case(FSYNC, errno.EIO, "a checkpoint", False,
                                broker=FAST_CHECKPOINTS),
    "fsync-at-flush-ms": Case(FSYNC, errno.EIO, "a flush", False, {"flush.ms": "200"},
                              FAST_TIMER),
    "open-emfile-at-roll": Case(OPEN, errno.EMFILE, "an append", True, SMALL_SEGMENTS),
    "rename-at-roll": Case(RENAME, errno.EIO, "an append", True, SMALL_SEGMENTS),
    "rename-at-checkpoint": Case(RENAME, errno.EIO, "a checkpoint", False,
                                 broker=FAST_CHECKPOINTS),
    "rename-at-compaction-swap": Case(RENAME, errno.EIO, "a compaction pass", False,
                                      COMPACTION, {**FAST_TIMER, "log.cleaner.backoff.ms": "100"},
                                      keys=5),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_failed_file_operation_takes_the_partition_offline_and_loses_nothing(
        kip_broker, fiu, case: Case) -> None:
    broker = kip_broker(case.broker, wrapper=fiu)
    topic = unique("file-op")
    create_topics(broker.bootstrap, {topic: 1}, case.topic)
    writer = IdempotentWriter(broker.bootstrap, topic, keys=case.keys)
    writer.write(40 if case.keys else 5)
    segments = len(segment_files(broker.data_dir, topic))
    mark = len(broker.stderr_text())

    fail(broker.pid, case.point, error=case.error)
    if case.rolls:
        # Appends into the active segment need neither fsync nor open: acknowledged.
        for _ in range(40):
            refused = writer.write_one()
            if refused.error_code != ec.NONE:
                break
        assert refused.error_code == ec.KAFKA_STORAGE_ERROR
        assert len(writer.acked) > 6
        assert len(segment_files(broker.data_dir, topic)) == segments  # the roll was undone
    elif case.keys is None:
        # Unflushed data for flush.ms to fsync: acknowledged, unless the timer's operation
        # failed first and the partition is offline already.
        assert writer.write_one().error_code in (ec.NONE, ec.KAFKA_STORAGE_ERROR)
    needle = f"offline after an I/O error in {case.what}"
    logged = broker.wait_for_log(needle, start=mark)
    line = next(line for line in logged.splitlines() if needle in line)
    assert f"[Errno {case.error}]" in line, line
    # The disk works again (new connections too: a process out of descriptors could not
    # load the code for a request it has not seen yet), the partition stays offline.
    fail(broker.pid, case.point, on=False)
    assert writer.send(len(writer.acked), b"while offline").error_code == (
        ec.KAFKA_STORAGE_ERROR)
    assert watermark_error(broker.bootstrap, topic) == "KAFKA_STORAGE_ERROR"

    restart_healthy(broker)
    acked = [(sent.offset, sent.value) for sent in writer.acked]
    end = acked[-1][0] + 1
    assert high_watermark(broker.bootstrap, topic) == end
    got = read_partition(broker.bootstrap, topic, expect=None if case.keys else end)
    if case.keys is None:
        assert got == acked
    else:  # the restarted cleaner may have compacted since: what it keeps is what was acked
        assert set(got) <= set(acked)
        assert {acked[-1 - i] for i in range(case.keys)} <= set(got)
    writer.reconnect(broker.bootstrap)
    again = writer.write_one()
    assert (again.error_code, again.base_offset) == (ec.NONE, end)
    writer.close()


def test_a_failed_fsync_at_a_clean_stop_is_reported_and_every_partition_closed(
        kip_broker, fiu) -> None:
    """The stop's flush is where the default policy's data is fsynced: when it fails, every
    partition is still closed (each failure one log line), the broker exits with status 2
    and one line saying which logs were not closed cleanly, and the next start recovers
    them (here the page cache still held every acknowledged record)."""
    broker = kip_broker(wrapper=fiu)
    topics = [unique("stop-a"), unique("stop-b")]
    create_topics(broker.bootstrap, dict.fromkeys(topics, 1))
    writers = [IdempotentWriter(broker.bootstrap, topic) for topic in topics]
    for writer in writers:
        writer.write(5)
    fail(broker.pid, FSYNC)
    assert broker.stop() == 2
    logged = broker.stderr_text()
    for topic in topics:
        assert f"{topic}-0 was not closed cleanly ([Errno 5]" in logged
    assert logged.splitlines()[-1].startswith("kip broker: ")

    broker.wrapper = []
    broker.start()
    for topic, writer in zip(topics, writers, strict=True):
        acked = [(sent.offset, sent.value) for sent in writer.acked]
        assert read_partition(broker.bootstrap, topic, expect=len(acked)) == acked
        writer.reconnect(broker.bootstrap)
        assert writer.write_one().base_offset == len(acked)
        writer.close()


def test_a_request_whose_code_cannot_be_loaded_closes_its_connection_with_one_line(
        kip_broker, fiu) -> None:
    """Out of file descriptors, a request of a kind the broker has not served yet cannot load
    its protocol code (the schemas are imported on first use): the connection is closed with
    one line naming the API and the error, and the same request is served once files open
    again."""
    broker = kip_broker(wrapper=fiu)
    client = RawClient(broker.bootstrap)
    fail(broker.pid, OPEN, error=errno.EMFILE)
    with pytest.raises(ConnectionError):
        describe_broker_configs(client)
    fail(broker.pid, OPEN, on=False)
    logged = broker.wait_for_log(f"cannot serve api {DESCRIBE_CONFIGS} v4 ([Errno 24]")
    assert logged.count("closing") == 1
    client = RawClient(broker.bootstrap)
    assert describe_broker_configs(client).results[0].error_code == ec.NONE
    client.close()


DESCRIBE_CONFIGS = 32


def describe_broker_configs(client: RawClient):
    return client.request(DESCRIBE_CONFIGS, 4, resources=[{
        "resource_type": 4, "resource_name": "1", "configuration_keys": None}],
        include_synonyms=False, include_documentation=False)


def test_a_compacted_copy_that_cannot_be_written_leaves_the_partition_online(
        kip_broker, fiu) -> None:
    """open failing (EMFILE) for the compaction's ``.cleaned`` copy: the log's own files are
    unchanged, so the partition stays online (one line, the copy dropped) and the next pass,
    once files open again, compacts."""
    broker = kip_broker({**FAST_TIMER, "log.cleaner.backoff.ms": "100"}, wrapper=fiu)
    topic = unique("compact-copy")
    create_topics(broker.bootstrap, {topic: 1}, COMPACTION)
    writer = IdempotentWriter(broker.bootstrap, topic, keys=5)
    writer.write(40)
    mark = len(broker.stderr_text())
    fail(broker.pid, OPEN, error=errno.EMFILE)
    logged = broker.wait_for_log("compacting segment 0 failed ([Errno 24]", start=mark)
    assert "offline" not in logged
    fail(broker.pid, OPEN, on=False)
    broker.wait_for_log("compacted", start=mark)
    assert high_watermark(broker.bootstrap, topic) == 40  # answered: it never went offline
    acked = [(sent.offset, sent.value) for sent in writer.acked]
    got = read_partition(broker.bootstrap, topic)
    assert set(got) <= set(acked) and {acked[-1 - i] for i in range(5)} <= set(got)
    assert len(got) < len(acked)
    assert writer.write_one().base_offset == 40
    writer.close()
