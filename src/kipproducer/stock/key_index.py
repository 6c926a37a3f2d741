"""The emulated writer's key index for per-key conditions on a stock cluster
(docs/per-key-conditional.md, "Emulated mode"): key -> offset of its last committed live
record in one partition, built by reading the partition at read_committed with the project's
own Fetch reader (mirror/fetcher.py: aborted batches and markers dropped there, records
decoded in C by ``ArrowRows``), and brought up to date the same way before each conditional
append.

The answers follow the native ones (broker/storage/key_index.py): a tombstone makes the key
absent, aborted and control records never count, compaction never changes an answer (it
keeps every key's last record and drops a tombstone, which answers the same).
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from confluent_kafka import KafkaError, KafkaException

from .._arrow_rows import ArrowRows
from ..errors import KEY_ABSENT, KeyConditionKafkaError
from ..protocol import error_codes as ec

#: Records folded into the index at a time (the decoded columns are bounded by it).
FOLD_ROWS = 65_536


@dataclass(slots=True)
class PartitionKeys:
    """One partition's index: ``last[key]`` is the offset of the key's last committed live
    record below ``covered`` (keys absent there are not in it). With an index topic,
    ``dirty`` holds the answers changed since the index topic last took them (KEY_ABSENT
    for a key made absent), and ``partitions`` the topic's partition count its checkpoint
    pinned (0: none). ``at_end``: the log ended right after this writer's own last commit
    marker (``covered``) when it was last looked at, so nobody else was writing there: the
    next call writes without looking first (its records are committed only if they land
    at ``covered``, so a record appended since costs an aborted attempt, never a wrong
    answer)."""

    covered: int = 0
    last: dict[bytes, int] = field(default_factory=dict)
    dirty: dict[bytes, int] | None = None
    partitions: int = 0
    at_end: bool = False

    def answer(self, key: bytes) -> int:
        return self.last.get(key, KEY_ABSENT)

    def record(self, key: Any, offset: int, tombstone: bool) -> None:
        if key is None:
            return
        key = key_bytes(key)
        if tombstone:
            self.last.pop(key, None)
        else:
            self.last[key] = offset


def key_bytes(key: Any) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def _valid(validity: Any, n: int) -> list[bool] | None:
    """An Arrow validity bitmap as n booleans (None: every entry is valid)."""
    if not validity:
        return None
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[:n]
    return bits.astype(bool).tolist()


def fold(done: Mapping[str, Any], index: PartitionKeys) -> None:
    """Fold ArrowRows.finish()'s columns (records in offset order) into ``index``."""
    n = done["rows"]
    if not n:
        return
    offsets = np.frombuffer(done["offset"], np.int64).tolist()
    key_validity, key_offsets, key_data, _ = done["key"]
    keys_ok = _valid(key_validity, n)
    values_ok = _valid(done["value"][0], n)
    bounds = np.frombuffer(key_offsets, np.int32).tolist()
    data = bytes(key_data)
    last = index.last
    dirty = index.dirty
    for i in range(n):
        if keys_ok is not None and not keys_ok[i]:
            continue  # a null key has no answer to keep
        key = data[bounds[i]:bounds[i + 1]]
        if values_ok is not None and not values_ok[i]:
            last.pop(key, None)  # a tombstone: absent
            answer = KEY_ABSENT
        else:
            answer = last[key] = offsets[i]
        if dirty is not None:
            dirty[key] = answer


def read_committed_keys(connection: Mapping[str, Any], topic: str, partition: int,
                        index: PartitionKeys, end: int, timeout_s: float) -> int:
    """Fold the committed records of [index.covered, end) into the index; ``end`` is at or
    below the partition's last stable offset (every transaction below it decided). Returns
    how many records were read."""
    if end <= index.covered:
        return 0
    read = [0]

    def take(done: Mapping[str, Any]) -> None:
        read[0] += done["rows"]
        fold(done, index)

    read_committed(connection, topic, partition, index.covered, end, timeout_s, take)
    index.covered = end
    return read[0]


def read_committed(connection: Mapping[str, Any], topic: str, partition: int, start: int,
                   end: int, timeout_s: float, take: Callable[[Mapping[str, Any]], None]
                   ) -> None:
    """The committed records of [start, end) of a partition, handed to ``take`` as
    ArrowRows.finish() columns, in offset order."""
    # (imported here: the mirror package imports the Producer, which imports this module)
    from ..mirror.fetcher import FetchReader
    from ..mirror.topics import MirrorError

    try:
        reader = FetchReader(connection, "read_committed", timeout=timeout_s)
    except MirrorError as exc:
        raise KafkaException(KafkaError(
            KafkaError._UNSUPPORTED_FEATURE,
            f"expected_key_offset= (emulated): the key index is read with the project's "
            f"Fetch client, which cannot connect with this configuration: {exc}")) from None
    rows = ArrowRows(False)
    where = (topic, partition)
    deadline = time.monotonic() + timeout_s
    try:
        reader.assign({where: start})
        position = start
        while position < end:
            try:
                answers = reader.poll(0.2)
            except MirrorError as exc:
                raise KafkaException(KafkaError(
                    KafkaError._TRANSPORT,
                    f"reading {topic}[{partition}] for its key index: {exc}")) from None
            if not answers and time.monotonic() > deadline:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT,
                    f"reading {topic}[{partition}] for its key index: stuck at offset "
                    f"{position} of {end} for {timeout_s:.0f} s"))
            for answer in answers:
                for batch in answer.batches:
                    batch.decode_into(rows, end)
                    if rows.rows >= FOLD_ROWS:
                        take(rows.finish())
                # (an answer at the stable end with nothing after it: compacted or deleted
                # offsets up to ``end``)
                position = end if answer.at_end else max(position, answer.next_offset)
        take(rows.finish())
    finally:
        reader.close()


def checks(keys: list, expected: list[int | None]) -> list[tuple[int, bytes, int]]:
    """(record index, key bytes, expected offset) of each record with a condition: what
    conflicts() checks."""
    return [(i, key_bytes(k), e) for i, (k, e) in enumerate(zip(keys, expected, strict=True))
            if e is not None]


class KeyAnswers(Protocol):
    """What a condition is checked against: a PartitionKeys, or an open transaction's view
    of one (txn_keys.PartitionTxnKeys)."""

    def answer(self, key: bytes) -> int: ...


def conflicts(index: KeyAnswers, checks: list[tuple[int, bytes, int]],
              log_start: int = 0) -> dict[int, int]:
    """record index -> the key's actual last offset, for every condition that fails (a last
    record below ``log_start``, deleted by retention, is absent)."""
    wrong = {}
    for i, key, expected in checks:
        actual = index.answer(key)
        if actual < log_start:
            actual = KEY_ABSENT
        if actual != expected:
            wrong[i] = actual
    return wrong


def record_errors(topic: str, partition: int, keys: list, expected: list,
                  wrong: Mapping[int, int]) -> list[KeyConditionKafkaError]:
    """Each record's error of a refused conditional batch: KEY_OFFSET_MISMATCH with the
    actual offset for a failed condition, OPERATION_NOT_ATTEMPTED for the others (written
    whole or not at all), as native mode reports them."""
    where = f"{topic}[{partition}]"
    first = min(wrong)
    out = []
    for i, key in enumerate(keys):
        kb = None if key is None else key_bytes(key)
        want = expected[i]
        if i in wrong:
            actual = wrong[i]
            text = (f"{where}: key {kb!r}: expected "
                    f"{'absent' if want == KEY_ABSENT else want}, actual "
                    f"{'absent' if actual == KEY_ABSENT else actual}; nothing of its batch "
                    "was written (emulated)")
            out.append(KeyConditionKafkaError(ec.KEY_OFFSET_MISMATCH, text, topic=topic,
                                              partition=partition, key=kb, expected=want,
                                              actual=actual))
        else:
            text = (f"{where}: not written: the condition on key {keys[first]!r} (record "
                    f"{first} of the same batch) failed, and a batch is written whole or not "
                    "at all")
            out.append(KeyConditionKafkaError(ec.OPERATION_NOT_ATTEMPTED, text, topic=topic,
                                              partition=partition, key=kb, expected=want,
                                              actual=KEY_ABSENT))
    return out


def batch_failed(topic: str, partition: int, keys: list, expected: list, code: int,
                 text: str, *, retriable: bool = False) -> list[KeyConditionKafkaError]:
    """Every record of a conditional batch failed with the same ``code`` (a refused partition
    count, a fenced writer, a timeout): none written."""
    return [KeyConditionKafkaError(code, f"{topic}[{partition}]: {text}", topic=topic,
                                   partition=partition,
                                   key=None if key is None else key_bytes(key),
                                   expected=expected[i], actual=KEY_ABSENT,
                                   retriable=retriable)
            for i, key in enumerate(keys)]


def retention_ages_keys_out(admin: Any, topic: str, timeout_s: float) -> str | None:
    """What in ``topic``'s configuration can delete a key's last record (a ``delete`` cleanup
    policy with a finite ``retention.ms`` or ``retention.bytes``), or None."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout_s)
    except KafkaException:
        raise
    except Exception as exc:  # noqa: BLE001 - a timeout of the future, say
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                        f"the configuration of {topic}: {exc}")) from None

    def value(name: str, default: str) -> str:
        entry = configs.get(name)
        return default if entry is None or entry.value is None else str(entry.value)

    policy = value("cleanup.policy", "delete")
    if "delete" not in [p.strip() for p in policy.split(",")]:
        return None
    ms, size = int(value("retention.ms", "-1")), int(value("retention.bytes", "-1"))
    if ms < 0 and size < 0:
        return None
    return f"cleanup.policy={policy} with retention.ms={ms}, retention.bytes={size}"


# ---- the index topic: a faster takeover -----------------------------------------------------
#
# With kip.emulation.key.index.topic, every conditional transaction also writes, to a
# compacted topic, the answers that changed since the last one (the call's own records and
# what the writer read of other writers) and a checkpoint: "every committed record of this
# partition below C is in the entries". Being in the same transaction, the entries are
# committed exactly when the records are. A new writer reads the entries of its partition
# (about one record per key once compacted) and then the partition only from C on.

_ENTRY, _CHECKPOINT = b"k", b"c"
_OFFSET = struct.Struct(">q")
_CHECKPOINT_VALUE = struct.Struct(">qi")  # covered, the topic's partition count


def _prefix(kind: bytes, topic: str, partition: int) -> bytes:
    name = topic.encode()
    return kind + struct.pack(">H", len(name)) + name + struct.pack(">i", partition)


def index_partition(topic: str, partition: int, index_partitions: int) -> int:
    """The index topic's partition that holds ``topic``[``partition``]'s entries."""
    return zlib.crc32(_prefix(b"", topic, partition)) % index_partitions


def snapshot_records(topic: str, partition: int, answers: Mapping[bytes, int], covered: int,
                     partitions: int) -> tuple[list, list]:
    """keys, values of the index topic's records for these answers and the checkpoint (a
    null value for an absent key: the cleaner drops it in the end)."""
    entry = _prefix(_ENTRY, topic, partition)
    keys = [entry + key for key in answers]
    values = [None if answer == KEY_ABSENT else _OFFSET.pack(answer)
              for answer in answers.values()]
    keys.append(_prefix(_CHECKPOINT, topic, partition))
    values.append(_CHECKPOINT_VALUE.pack(covered, partitions))
    return keys, values


def load_snapshot(connection: Mapping[str, Any], index_topic: str, index_part: int, end: int,
                  topic: str, partition: int, timeout_s: float) -> PartitionKeys:
    """``topic``[``partition``]'s index as the index topic's partition ``index_part`` holds it
    up to ``end`` (its last stable offset): the entries, and ``covered`` from the last
    checkpoint (0, and no entry, when there is none)."""
    entry = _prefix(_ENTRY, topic, partition)
    checkpoint = _prefix(_CHECKPOINT, topic, partition)
    last: dict[bytes, int] = {}
    found: list[tuple[int, int]] = []
    cut = len(entry)

    def take(done: Mapping[str, Any]) -> None:
        n = done["rows"]
        if not n:
            return
        key_validity, key_offsets, key_data, _ = done["key"]
        value_validity, value_offsets, value_data, _ = done["value"]
        keys_ok = _valid(key_validity, n)
        values_ok = _valid(value_validity, n)
        kb = np.frombuffer(key_offsets, np.int32).tolist()
        vb = np.frombuffer(value_offsets, np.int32).tolist()
        kdata, vdata = bytes(key_data), bytes(value_data)
        for i in range(n):
            if keys_ok is not None and not keys_ok[i]:
                continue
            key = kdata[kb[i]:kb[i + 1]]
            present = values_ok is None or values_ok[i]
            if key.startswith(entry):
                if present:
                    last[key[cut:]] = _OFFSET.unpack_from(vdata, vb[i])[0]
                else:
                    last.pop(key[cut:], None)
            elif key == checkpoint and present:
                found.append(_CHECKPOINT_VALUE.unpack_from(vdata, vb[i]))

    read_committed(connection, index_topic, index_part, 0, end, timeout_s, take)
    if not found:
        return PartitionKeys(dirty={})
    covered, partitions = found[-1]
    return PartitionKeys(covered=covered, last=last, dirty={}, partitions=partitions)


def ensure_index_topic(admin: Any, name: str, timeout_s: float) -> None:
    """Create the index topic (compacted, one partition, the cluster's default replication)
    when it is missing."""
    from confluent_kafka.admin import NewTopic

    if name in admin.list_topics(name, timeout=timeout_s).topics and \
            admin.list_topics(name, timeout=timeout_s).topics[name].error is None:
        return
    future = admin.create_topics(
        [NewTopic(name, 1, -1, config={"cleanup.policy": "compact"})],
        request_timeout=timeout_s)[name]
    try:
        future.result(timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
